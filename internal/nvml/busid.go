package nvml

import (
	"strconv"
	"strings"
)

// parseBusID reads the formats nvmlDeviceGetHandleByPciBusId_v2 takes, all in hex:
// domain:bus:device.function, domain:bus:device and bus:device.function.
func parseBusID(s string) (domain, bus, dev, fn uint32, ok bool) {
	parts := strings.Split(s, ":")
	last := parts[len(parts)-1]
	devPart, fnPart, hasFn := strings.Cut(last, ".")
	var fields []string
	switch {
	case len(parts) == 3:
		fields = []string{parts[0], parts[1], devPart}
	case len(parts) == 2 && hasFn:
		fields = []string{"0", parts[0], devPart}
	default:
		return 0, 0, 0, 0, false
	}
	if hasFn {
		fields = append(fields, fnPart)
	} else {
		fields = append(fields, "0")
	}
	var v [4]uint32
	for i, x := range fields {
		n, err := strconv.ParseUint(x, 16, 32)
		if err != nil {
			return 0, 0, 0, 0, false
		}
		v[i] = uint32(n)
	}
	return v[0], v[1], v[2], v[3], true
}
