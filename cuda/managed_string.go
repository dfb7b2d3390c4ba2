package cuda

import "fmt"

// String names the advice for logs and errors: "set-read-mostly", "unset-accessed-by", and
// "Advice(7)" for a value the driver's headers do not define.
func (a Advice) String() string {
	switch a {
	case AdviseSetReadMostly:
		return "set-read-mostly"
	case AdviseUnsetReadMostly:
		return "unset-read-mostly"
	case AdviseSetPreferredLocation:
		return "set-preferred-location"
	case AdviseUnsetPreferredLocation:
		return "unset-preferred-location"
	case AdviseSetAccessedBy:
		return "set-accessed-by"
	case AdviseUnsetAccessedBy:
		return "unset-accessed-by"
	}
	return fmt.Sprintf("Advice(%d)", int32(a))
}

// String names the location type for logs and errors: "device", "host-numa", and
// "LocationType(9)" for a value the driver's headers do not define.
func (t LocationType) String() string {
	switch t {
	case LocationInvalid:
		return "invalid"
	case LocationDevice:
		return "device"
	case LocationHost:
		return "host"
	case LocationHostNUMA:
		return "host-numa"
	case LocationHostNUMACurrent:
		return "host-numa-current"
	}
	return fmt.Sprintf("LocationType(%d)", int32(t))
}
