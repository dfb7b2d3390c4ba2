package cuda

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc"
)

// MemPool is a CUmemoryPool: a stream-ordered allocator's pool of memory on a device or in
// host memory (cuMemPoolCreate).
type MemPool uintptr

// Memory location types (CU_MEM_LOCATION_TYPE_*), for a MemLocation.
const (
	// LocationDevice is a device; the id is its ordinal.
	LocationDevice = 1
	// LocationHost is host memory (CUDA 13 for memory pools).
	LocationHost = 2
	// LocationHostNUMA is a host NUMA node; the id is the node (CUDA 12.6 for memory pools).
	LocationHostNUMA = 3
)

// MemPoolProps are the properties of a new pool (CUmemPoolProps): its location, the handle
// types it may be exported as (0: none; a host pool takes none) and the most bytes it may
// hold (0: no limit).
type MemPoolProps struct {
	Location    MemLocation
	HandleTypes int32
	MaxSize     uintptr
}

// MemPoolAttr is a pool attribute (CUmemPool_attribute).
type MemPoolAttr int32

// Pool attributes with 64-bit values (MemPoolSetAttribute, MemPoolGetAttribute).
const (
	// PoolAttrReleaseThreshold is the bytes a pool keeps before releasing memory to the system
	// at a synchronize; 0 by default, which releases everything free at every synchronize.
	PoolAttrReleaseThreshold MemPoolAttr = 4
	// PoolAttrReservedMemCurrent is the bytes the pool holds (read-only).
	PoolAttrReservedMemCurrent MemPoolAttr = 5
	// PoolAttrReservedMemHigh is the high-water mark of the bytes held; set it to 0 to reset.
	PoolAttrReservedMemHigh MemPoolAttr = 6
	// PoolAttrUsedMemCurrent is the bytes allocated from the pool and not freed (read-only).
	PoolAttrUsedMemCurrent MemPoolAttr = 7
	// PoolAttrUsedMemHigh is the high-water mark of the bytes allocated; set it to 0 to reset.
	PoolAttrUsedMemHigh MemPoolAttr = 8
)

// MemPoolCreate creates a memory pool with props. A pool in host memory (LocationHostNUMA
// from CUDA 12.6, LocationHost from 13.0) is accessible to no device until MemPoolSetAccess
// grants it; an older driver refuses the location (an error matching ErrNotSupported or
// ErrInvalidValue). Destroy it with MemPoolDestroy.
func (d *Device) MemPoolCreate(props MemPoolProps) (p MemPool, err error) {
	err = d.Do(func() (e error) { p, e = d.drv.memPoolCreate(props); return })
	return p, d.track(&d.pools, uint64(p), 1, err)
}

// DefaultMemPool returns the device's default pool, the one MemAllocAsync draws from: the driver
// owns it (MemPoolDestroy refuses it), and its attributes hold for every user of the device in
// the process (PyTorch's cudaMallocAsync backend sets its release threshold to UINT64_MAX).
// ErrClosed after Close.
func (d *Device) DefaultMemPool() (MemPool, error) {
	if !d.enter() {
		return 0, d.closedError()
	}
	defer d.exit()
	return d.drv.deviceDefaultMemPool(d.dev)
}

// MemPoolDestroy destroys a pool. Allocations still outstanding stay valid until freed; the
// pool goes with the last.
func (d *Device) MemPoolDestroy(p MemPool) error {
	return d.track(&d.pools, uint64(p), -1, d.Do(func() error { return d.drv.memPoolDestroy(p) }))
}

// MemPoolSetAttribute sets a 64-bit attribute of the pool.
func (d *Device) MemPoolSetAttribute(p MemPool, attr MemPoolAttr, v uint64) error {
	return d.Do(func() error { return d.drv.memPoolSetAttribute(p, attr, v) })
}

// MemPoolGetAttribute reads a 64-bit attribute of the pool.
func (d *Device) MemPoolGetAttribute(p MemPool, attr MemPoolAttr) (v uint64, err error) {
	err = d.Do(func() (e error) { v, e = d.drv.memPoolGetAttribute(p, attr); return })
	return
}

// MemPoolSetAccess grants the devices in locs read and write access to every allocation of the
// pool, past and future (CU_MEM_ACCESS_FLAGS_PROT_READWRITE), in one call; revoke, when true,
// takes it away instead (CU_MEM_ACCESS_FLAGS_PROT_NONE). At most 16 locations.
func (d *Device) MemPoolSetAccess(p MemPool, locs []MemLocation, revoke bool) error {
	if len(locs) == 0 || len(locs) > maxAccess {
		return fmt.Errorf("%w: pool access for %d locations (want 1 to %d)", pinmalloc.ErrInvalidValue, len(locs), maxAccess)
	}
	return d.Do(func() error { return d.drv.memPoolSetAccess(p, locs, revoke) })
}

// MemPoolTrimTo releases the pool's free memory down to keep bytes.
func (d *Device) MemPoolTrimTo(p MemPool, keep uintptr) error {
	return d.Do(func() error { return d.drv.memPoolTrimTo(p, keep) })
}

// MemAllocFromPoolAsync allocates n bytes from pool p, ordered on stream s. The memory is
// counted with DeviceAllocs (it is freed with MemFreeAsync or MemFree), host pool or not.
func (d *Device) MemAllocFromPoolAsync(n uintptr, p MemPool, s Stream) (ptr DevicePtr, err error) {
	err = d.Do(func() (e error) { ptr, e = d.drv.memAllocFromPoolAsync(n, p, s); return })
	return ptr, d.track(&d.deviceAllocs, uint64(ptr), 1, err)
}
