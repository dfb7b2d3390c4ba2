package cuda

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc"
)

// Device attributes of the VMM API for host memory (CU_DEVICE_ATTRIBUTE_*).
const (
	// AttrHostNUMAID is the NUMA node of the host memory nearest the device, or -1 when the
	// driver does not know it.
	AttrHostNUMAID = 134
	// AttrHostNUMAVirtualMemoryManagementSupported is 1 when MemCreateAt accepts host NUMA
	// locations (CU_MEM_LOCATION_TYPE_HOST_NUMA).
	AttrHostNUMAVirtualMemoryManagementSupported = 141
	// AttrHostVirtualMemoryManagementSupported is 1 when MemCreateAt accepts the host location
	// (CU_MEM_LOCATION_TYPE_HOST), CUDA 13 and later.
	AttrHostVirtualMemoryManagementSupported = 145
)

// HostVMMSupported reports whether the VMM API can create host memory on this device's
// driver: the host location (attribute 145, CUDA 13) or host NUMA nodes (attribute 141).
func (d *Device) HostVMMSupported() (host, numa bool) {
	v, err := d.Attribute(AttrHostVirtualMemoryManagementSupported)
	host = err == nil && v != 0
	v, err = d.Attribute(AttrHostNUMAVirtualMemoryManagementSupported)
	numa = err == nil && v != 0
	return host, numa
}

// HostNUMAID returns the NUMA node of the host memory nearest the device, and false when the
// driver does not say.
func (d *Device) HostNUMAID() (int, bool) {
	v, err := d.Attribute(AttrHostNUMAID)
	return v, err == nil && v >= 0
}

// MemGetAllocationGranularityAt returns the minimum granularity of a physical allocation at
// loc (a device, the host or a host NUMA node).
func (d *Device) MemGetAllocationGranularityAt(loc MemLocation) (g uintptr, err error) {
	err = d.Do(func() (e error) { g, e = d.drv.memGetGranularityAt(loc, false); return })
	return
}

// MemCreateAt allocates size bytes of pinned physical memory at loc: a device, the host
// (CU_MEM_LOCATION_TYPE_HOST) or a host NUMA node (HOST_NUMA; the driver refuses
// HOST_NUMA_CURRENT). size must be a multiple of the location's granularity.
// Host memory is not accessible, to the CPU either, until MemSetAccessAt grants a host
// location access to its mapping.
func (d *Device) MemCreateAt(size uintptr, loc MemLocation) (h MemHandle, err error) {
	err = d.Do(func() (e error) { h, e = d.drv.memCreateAt(size, loc); return })
	return h, d.track(&d.handles, uint64(h), 1, err)
}

// MaxAccess is the most locations one MemSetAccessAt call grants access to: the size of the
// access-descriptor list the binding passes to cuMemSetAccess.
const MaxAccess = maxAccess

// MemSetAccessAt makes the mapped range [p, p+size) readable and writable by every location
// in locs (devices, and for host memory the host location the CPU accesses it from), in one
// call. At most MaxAccess locations.
func (d *Device) MemSetAccessAt(p DevicePtr, size uintptr, locs []MemLocation) error {
	if len(locs) == 0 || len(locs) > maxAccess {
		return fmt.Errorf("%w: access for %d locations (want 1 to %d)", pinmalloc.ErrInvalidValue, len(locs), maxAccess)
	}
	return d.Do(func() error { return d.drv.memSetAccessAt(p, size, locs) })
}
