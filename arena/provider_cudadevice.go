package arena

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/align"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// DefaultDeviceShare is the share of a device's free memory that DefaultDeviceCapacity gives
// an arena, in percent.
const DefaultDeviceShare = 90

// DefaultDeviceCapacity is the capacity of a device arena whose Options.Capacity is zero:
// DefaultDeviceShare percent of the memory free on dev now, rounded down to the device's
// allocation granularity (2 MiB on an H100). Each device of a multi-GPU machine gets its own
// provider and arena, sized by its own free memory.
func DefaultDeviceCapacity(dev *cuda.Device) (uintptr, error) {
	if dev == nil {
		return 0, fmt.Errorf("%w: no CUDA device: %w", ErrInvalid, cuda.ErrNoDriver)
	}
	free, _, err := dev.MemGetInfo()
	if err != nil {
		return 0, fmt.Errorf("%w: free memory of device %d: %w", ErrReserve, dev.Ordinal(), err)
	}
	g := deviceGranule(dev)
	c := capacityFromFree(free, g)
	if c == 0 {
		return 0, fmt.Errorf("%w: device %d has %d bytes free, less than one %d-byte granule for an arena",
			ErrCapacity, dev.Ordinal(), free, g)
	}
	return c, nil
}

// capacityFromFree is DefaultDeviceShare percent of free, rounded down to granule g.
func capacityFromFree(free, g uintptr) uintptr { return free / 100 * DefaultDeviceShare / g * g }

// deviceGranule is the VMM allocation granularity when the device has the VMM API, else the
// default chunk size.
func deviceGranule(dev *cuda.Device) uintptr {
	if dev.VMMSupported() {
		if g, _, err := dev.MemGetAllocationGranularity(); err == nil && align.IsPow2(g) {
			return g
		}
	}
	return DefaultChunkSize
}

// deviceCapacity gives the device providers their DefaultCapacity method.
type deviceCapacity struct{ capDev *cuda.Device }

// DefaultCapacity is DefaultDeviceCapacity, computed when asked (an arena asks once, at New,
// when Options.Capacity is zero); 0 when it cannot be found. It is a default, not a cap: an
// arena may be given more.
func (c deviceCapacity) DefaultCapacity() uintptr {
	n, _ := DefaultDeviceCapacity(c.capDev)
	return n
}

// NewDeviceProvider returns the best provider of device memory dev offers: the VMM provider
// (commit and decommit by granule) where the VMM API is supported, else the cuMemAlloc one.
func NewDeviceProvider(dev *cuda.Device) (Provider, error) {
	if dev != nil && dev.VMMSupported() {
		return NewCUDAVMM(dev)
	}
	return NewCUDAMalloc(dev)
}

// CUDA device memory through the virtual memory management API.

// CUDAVMMProvider hands out device memory with the CUDA VMM API: Reserve reserves device
// address space (cuMemAddressReserve, aligned as asked), Commit backs each granule of a range
// with its own physical allocation (cuMemCreate + cuMemMap) and makes the range accessible
// (cuMemSetAccess), Decommit unmaps the range and releases its granules, so memory goes back
// to the device granule by granule.
type CUDAVMMProvider struct {
	*cudaBase
	deviceCapacity
	gran uintptr
}

// vmmRegion is a VMM region's state: the physical allocation mapped at each granule.
type vmmRegion struct {
	handles []cuda.MemHandle
	mapped  bitmap
}

// NewCUDAVMM returns a VMM provider on dev. It fails with an error wrapping cuda.ErrNotSupported
// when the device lacks the VMM API.
func NewCUDAVMM(dev *cuda.Device) (*CUDAVMMProvider, error) {
	b, err := newCUDABase(dev, "cuda-vmm", Device)
	if err != nil {
		return nil, err
	}
	if !dev.VMMSupported() {
		return nil, fmt.Errorf("%w: device %d lacks the VMM API: %w", ErrInvalid, dev.Ordinal(), cuda.ErrNotSupported)
	}
	g, _, err := dev.MemGetAllocationGranularity()
	if err != nil {
		return nil, fmt.Errorf("%w: allocation granularity of device %d: %w", ErrInvalid, dev.Ordinal(), err)
	}
	if !align.IsPow2(g) {
		return nil, fmt.Errorf("%w: device %d granularity %d is not a power of two", ErrInvalid, dev.Ordinal(), g)
	}
	return &CUDAVMMProvider{cudaBase: b, deviceCapacity: deviceCapacity{dev}, gran: g}, nil
}

// Caps implements Provider.
func (p *CUDAVMMProvider) Caps() Caps {
	return Caps{Aligns: true, Decommits: true, Granule: p.gran}
}

// Reserve implements Provider.
func (p *CUDAVMMProvider) Reserve(size, alignment uintptr) (*Region, error) {
	n, err := align.Up(size, p.gran)
	if err != nil || n == 0 || !align.IsPow2(alignment) {
		return nil, fmt.Errorf("%w: reserve %d bytes aligned to %d", ErrInvalid, size, alignment)
	}
	size = n
	base, err := p.dev.MemAddressReserve(size, max(alignment, p.gran))
	if err = p.call(&p.reservations, 1, err); err != nil {
		return nil, p.driverError(ErrReserve, "cuMemAddressReserve", size, err)
	}
	ng := int(size / p.gran)
	return &Region{Base: base, Size: size, Handle: &vmmRegion{handles: make([]cuda.MemHandle, ng), mapped: newBitmap(ng)}}, nil
}

func (p *CUDAVMMProvider) state(r *Region, off, size uintptr) (*vmmRegion, error) {
	if err := checkRange(r, off, size); err != nil {
		return nil, err
	}
	v, ok := r.Handle.(*vmmRegion)
	if !ok {
		return nil, fmt.Errorf("%w: region not from this provider or released", ErrInvalid)
	}
	if off%p.gran != 0 || size%p.gran != 0 {
		return nil, fmt.Errorf("%w: range [%d, +%d) is not granule-aligned (%d)", ErrInvalid, off, size, p.gran)
	}
	return v, nil
}

// Commit implements Provider. Out of device memory, it fails with an error wrapping ErrCommit
// and cuda.ErrOutOfMemory that says how much was asked and is free, and commits nothing.
func (p *CUDAVMMProvider) Commit(r *Region, off, size uintptr) error {
	v, err := p.state(r, off, size)
	if err != nil {
		return err
	}
	lo, hi := int(off/p.gran), int((off+size)/p.gran)
	for g := lo; g < hi; g++ {
		if err := p.mapGranule(r, v, g); err != nil {
			_ = p.unmapGranules(r, v, lo, g)
			if errors.Is(err, cuda.ErrOutOfMemory) { // after the undo, so the figures are current
				return p.driverError(ErrCommit, "cuMemCreate", size, err)
			}
			return err
		}
	}
	if err := p.call(nil, 0, p.dev.MemSetAccess(r.Base+off, size)); err != nil {
		_ = p.unmapGranules(r, v, lo, hi)
		return fmt.Errorf("%w: cuMemSetAccess of %d bytes: %w", ErrCommit, size, err)
	}
	return nil
}

// mapGranule backs granule g with a new physical allocation.
func (p *CUDAVMMProvider) mapGranule(r *Region, v *vmmRegion, g int) error {
	if v.mapped.get(g) {
		return fmt.Errorf("%w: granule %d of region %#x is committed already", ErrInvalid, g, r.Base)
	}
	h, err := p.dev.MemCreate(p.gran)
	if err = p.call(&p.handles, 1, err); err != nil {
		if errors.Is(err, cuda.ErrOutOfMemory) {
			return err // Commit explains it
		}
		return p.driverError(ErrCommit, "cuMemCreate", p.gran, err)
	}
	if err := p.call(nil, 0, p.dev.MemMap(r.Base+uintptr(g)*p.gran, p.gran, h)); err != nil {
		_ = p.call(&p.handles, -1, p.dev.MemRelease(h))
		return fmt.Errorf("%w: cuMemMap of %d bytes: %w", ErrCommit, p.gran, err)
	}
	v.handles[g] = h
	v.mapped.setRange(g, g+1, true)
	p.committed.Add(int64(p.gran))
	return nil
}

// unmapGranules unmaps and releases the mapped granules in [lo, hi), run by run.
func (p *CUDAVMMProvider) unmapGranules(r *Region, v *vmmRegion, lo, hi int) error {
	return v.mapped.runs(lo, hi, true, func(s, e int) error {
		n := uintptr(e-s) * p.gran
		if err := p.call(nil, 0, p.dev.MemUnmap(r.Base+uintptr(s)*p.gran, n)); err != nil {
			return fmt.Errorf("%w: cuMemUnmap of %d bytes: %w", ErrCommit, n, err)
		}
		var errs []error
		for g := s; g < e; g++ {
			if err := p.call(&p.handles, -1, p.dev.MemRelease(v.handles[g])); err != nil {
				errs = append(errs, fmt.Errorf("%w: cuMemRelease: %w", ErrCommit, err))
			}
			v.handles[g] = 0
		}
		v.mapped.setRange(s, e, false)
		p.committed.Add(-int64(n))
		return errors.Join(errs...)
	})
}

// Decommit implements Provider: the range's granules are unmapped and their memory released
// to the device.
func (p *CUDAVMMProvider) Decommit(r *Region, off, size uintptr) error {
	v, err := p.state(r, off, size)
	if err != nil {
		return err
	}
	return p.unmapGranules(r, v, int(off/p.gran), int((off+size)/p.gran))
}

// Release implements Provider: what is still mapped is unmapped, then the address range freed.
func (p *CUDAVMMProvider) Release(r *Region) error {
	v, err := p.state(r, 0, r.Size)
	if err != nil {
		return err
	}
	if err := p.unmapGranules(r, v, 0, len(v.handles)); err != nil {
		return err
	}
	if err := p.call(&p.reservations, -1, p.dev.MemAddressFree(r.Base, r.Size)); err != nil {
		return fmt.Errorf("%w: cuMemAddressFree of %d bytes: %w", ErrInvalid, r.Size, err)
	}
	r.Handle = nil
	return nil
}

// Zero implements Zeroer with cuMemsetD8.
func (p *CUDAVMMProvider) Zero(addr, size uintptr) error { return p.memset(addr, size) }

// memset clears device-accessible memory with the driver.
func (b *cudaBase) memset(addr, size uintptr) error {
	if err := b.dev.MemsetD8(addr, 0, size); err != nil {
		return fmt.Errorf("%w: cuMemsetD8 of %d bytes at %#x: %w", ErrInvalid, size, addr, err)
	}
	return nil
}

// CUDA device memory from cuMemAlloc.

// CUDAMallocProvider hands out device memory from cuMemAlloc, one allocation per region, for
// devices without the VMM API. Regions are committed whole and never decommitted; their base is
// only 256-byte aligned, which the arena's base-relative chunk grid absorbs.
type CUDAMallocProvider struct {
	wholeRegions
	deviceCapacity
}

// NewCUDAMalloc returns a provider of device memory from cuMemAlloc.
func NewCUDAMalloc(dev *cuda.Device) (*CUDAMallocProvider, error) {
	w, err := newWholeRegions(dev, "cuda-malloc", Device, "cuMemAlloc", dev.MemAlloc, dev.MemFree)
	if err != nil {
		return nil, err
	}
	return &CUDAMallocProvider{w, deviceCapacity{dev}}, nil
}

// Zero implements Zeroer with cuMemsetD8.
func (p *CUDAMallocProvider) Zero(addr, size uintptr) error { return p.memset(addr, size) }

// CUDA managed memory.

// CUDAManagedProvider hands out managed (unified) memory from cuMemAllocManaged, one
// allocation per region, committed whole. The driver migrates its pages between host and
// device on demand; Prefetch and Advise steer it. Options.Capacity is required: managed memory
// may oversubscribe the device, so there is no default.
type CUDAManagedProvider struct {
	wholeRegions
}

// NewCUDAManaged returns a provider of managed memory attached globally (any stream, any
// device).
func NewCUDAManaged(dev *cuda.Device) (*CUDAManagedProvider, error) {
	w, err := newWholeRegions(dev, "cuda-managed", Managed, "cuMemAllocManaged",
		func(n uintptr) (uintptr, error) { return dev.MemAllocManaged(n, cuda.MemAttachGlobal) }, dev.MemFreeManaged)
	if err != nil {
		return nil, err
	}
	return &CUDAManagedProvider{w}, nil
}

// Zero implements Zeroer with cuMemsetD8, which does not migrate the pages to the host.
func (p *CUDAManagedProvider) Zero(addr, size uintptr) error { return p.memset(addr, size) }

// Prefetch queues a migration of [addr, addr+n) to loc (a device's Location, or
// cuda.HostLocation()) on stream s, with the CUDA 12.2+ cuMemPrefetchAsync_v2.
func (p *CUDAManagedProvider) Prefetch(addr, n uintptr, loc cuda.Location, s cuda.Stream) error {
	if err := p.dev.MemPrefetchAsync(addr, n, loc, s); err != nil {
		return fmt.Errorf("%w: prefetch %d bytes at %#x to %+v: %w", ErrInvalid, n, addr, loc, err)
	}
	return nil
}

// Advise gives the driver advice about [addr, addr+n) for loc, with the CUDA 12.2+
// cuMemAdvise_v2.
func (p *CUDAManagedProvider) Advise(addr, n uintptr, advice cuda.Advice, loc cuda.Location) error {
	if err := p.dev.MemAdvise(addr, n, advice, loc); err != nil {
		return fmt.Errorf("%w: advice %d for %d bytes at %#x: %w", ErrInvalid, advice, n, addr, err)
	}
	return nil
}
