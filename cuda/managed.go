package cuda

// Advice is a hint about a range of managed memory (CUmem_advise), given with
// cudamem.Managed.Advise.
type Advice int32

// Advice values (CU_MEM_ADVISE_*).
const (
	// AdviseSetReadMostly marks the range as mostly read: processors keep read-only copies.
	AdviseSetReadMostly Advice = 1
	// AdviseUnsetReadMostly undoes AdviseSetReadMostly.
	AdviseUnsetReadMostly Advice = 2
	// AdviseSetPreferredLocation makes the Location the range's preferred home.
	AdviseSetPreferredLocation Advice = 3
	// AdviseUnsetPreferredLocation clears the preferred location.
	AdviseUnsetPreferredLocation Advice = 4
	// AdviseSetAccessedBy keeps the range mapped for the Location, to avoid faults.
	AdviseSetAccessedBy Advice = 5
	// AdviseUnsetAccessedBy undoes AdviseSetAccessedBy.
	AdviseUnsetAccessedBy Advice = 6
)

// LocationType says what a Location's ID means (CUmemLocationType).
type LocationType int32

// Location types (CU_MEM_LOCATION_TYPE_*).
const (
	// LocationInvalid is the zero LocationType; the driver refuses it.
	LocationInvalid LocationType = 0
	// LocationDevice is a device; the ID is its ordinal.
	LocationDevice LocationType = 1
	// LocationHost is host memory; the ID is ignored.
	LocationHost LocationType = 2
	// LocationHostNUMA is a host NUMA node; the ID is the node.
	LocationHostNUMA LocationType = 3
	// LocationHostNUMACurrent is the NUMA node of the calling thread; the ID is ignored.
	LocationHostNUMACurrent LocationType = 4
)

// Location is a place memory lives or is reached from (CUmemLocation): where managed memory is
// prefetched to or advice is about (cudamem.Managed), where VMM host memory is created
// (cudamem.HostVMM.Location). It is the one location type of the module: the providers hand
// its fields to the driver as they are.
type Location struct {
	// Type says what ID means.
	Type LocationType
	// ID is a device ordinal or a NUMA node, depending on Type.
	ID int
}

// HostLocation returns the Location of host memory.
func HostLocation() Location { return Location{Type: LocationHost} }

// Location returns the device as a Location.
func (d *Device) Location() Location { return Location{Type: LocationDevice, ID: d.Ordinal()} }
