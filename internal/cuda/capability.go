package cuda

import (
	"errors"
	"fmt"
	"strings"

	"github.com/pinmalloc/pinmalloc"
)

// Capabilities a driver or device may lack. A GPU test that cannot run for want of one skips
// with Lacks's message, and the GPU check (scripts/gpucheck) reports it N/A, naming the
// capability, once it has seen for itself that the device lacks it; any other skip on a GPU
// fails the check.
const (
	CapBatchAPI          = "batch-api"                 // cuMemcpyBatchAsync_v2: CUDA 13.0
	CapVMM               = "vmm"                       // the virtual memory management API
	CapManaged           = "managed-memory"            // cuMemAllocManaged
	CapConcurrentManaged = "concurrent-managed-access" // prefetch and advice of managed memory
	CapMemoryPools       = "memory-pools"              // cuMemAllocAsync and device memory pools
	CapHostNUMAPools     = "host-numa-memory-pools"    // pools at a HOST_NUMA location: CUDA 12.6
	CapHostPools         = "host-memory-pools"         // pools at the HOST location: CUDA 13.0
	CapNVML              = "nvml"                      // libnvidia-ml.so.1 loads and initializes
)

// Device attributes of memory pools in host memory.
const (
	// AttrHostNUMAMemoryPoolsSupported is 1 when pools take a HOST_NUMA location (CUDA 12.9;
	// 12.6 to 12.8 make them without the attribute).
	AttrHostNUMAMemoryPoolsSupported = 142
	// AttrHostMemoryPoolsSupported is 1 when pools take the HOST location (CUDA 13.0).
	AttrHostMemoryPoolsSupported = 144
)

// lacksTag begins the message of Lacks.
const lacksTag = "lacks GPU capability "

// Lacks returns the message a GPU test skips with when the driver or the device lacks capability
// cap (one of the Cap constants): "lacks GPU capability CAP: why".
func Lacks(cap, why string) string { return lacksTag + cap + ": " + why }

// LackedCapability returns the capability a message made by Lacks names (the message may come
// with a prefix, as a test's log line does), and whether it names one.
func LackedCapability(msg string) (string, bool) {
	i := strings.Index(msg, lacksTag)
	if i < 0 {
		return "", false
	}
	cap, _, ok := strings.Cut(msg[i+len(lacksTag):], ":")
	return cap, ok && cap != ""
}

// HostPoolSupport says whether the device's driver makes memory pools at host location type loc
// (LocationHostNUMA or LocationHost), by the device attribute that says so
// (AttrHostNUMAMemoryPoolsSupported, AttrHostMemoryPoolsSupported), not by the driver's version.
// A driver too old to know the attribute refuses to answer it: for the HOST location, which came
// with its attribute in CUDA 13.0, that means no; for HOST_NUMA, which drivers of CUDA 12.6 to
// 12.8 make without the attribute, it creates such a pool and destroys it to find out. how says
// how the answer was found; err is set only when the driver failed otherwise.
func (d *Device) HostPoolSupport(loc int32) (ok bool, how string, err error) {
	attr := AttrHostNUMAMemoryPoolsSupported
	if loc == LocationHost {
		attr = AttrHostMemoryPoolsSupported
	} else if loc != LocationHostNUMA {
		return false, "", fmt.Errorf("%w: HostPoolSupport of location type %d", pinmalloc.ErrInvalidValue, loc)
	}
	v, aerr := d.Attribute(attr)
	switch {
	case aerr == nil:
		return v != 0, fmt.Sprintf("device attribute %d is %d", attr, v), nil
	case !errors.Is(aerr, pinmalloc.ErrInvalidValue):
		return false, "", wrap(aerr, "device attribute %d", attr)
	case loc == LocationHost:
		return false, fmt.Sprintf("the driver does not know device attribute %d (it came with HOST pools, in CUDA 13.0): %v", attr, aerr), nil
	}
	node, known := d.HostNUMAID()
	if !known {
		node = 0
	}
	p, cerr := d.MemPoolCreate(MemPoolProps{Location: MemLocation{Type: LocationHostNUMA, ID: int32(node)}})
	switch {
	case cerr == nil:
		return true, fmt.Sprintf("the driver does not know device attribute %d (before CUDA 12.9) and made a HOST_NUMA pool", attr), d.MemPoolDestroy(p)
	case errors.Is(cerr, pinmalloc.ErrNotSupported) || errors.Is(cerr, pinmalloc.ErrInvalidValue):
		return false, fmt.Sprintf("the driver does not know device attribute %d and refused a HOST_NUMA pool: %v", attr, cerr), nil
	}
	return false, "", wrap(cerr, "a HOST_NUMA pool to find whether the driver makes them")
}
