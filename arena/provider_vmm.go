package arena

// The CUDA virtual memory management API, shared by the device VMM provider (CUDAVMMProvider)
// and the host VMM provider (CUDAHostVMMProvider): they differ only in where the physical
// memory lives (the location given to cuMemCreate) and who is granted access to it.
//
// A region is one reservation of address space (cuMemAddressReserve). Each granule of it is
// backed by its own physical allocation: Commit creates one per granule (cuMemCreate), maps
// each (cuMemMap) and grants access to the whole range at once (cuMemSetAccess); Decommit
// unmaps the range (cuMemUnmap) and releases the granules' allocations (cuMemRelease). One
// allocation per granule is what makes decommit possible: the driver refuses to unmap part of
// a mapping. Consecutive mapped granules with access granted are one range for copies, so any
// run of committed granules can be copied in one call.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/pinmalloc/pinmalloc/internal/align"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// vmm is the VMM machinery of a provider: the physical location, the locations granted access,
// and the granule.
type vmm struct {
	*cudaBase
	loc    icuda.Location   // where cuMemCreate puts the memory
	access []icuda.Location // who may read and write it
	gran   uintptr
	what   string // "device" or "host", for errors
	zero   bool   // a fresh physical allocation reads as zero (measured for host memory)

	mu sync.Mutex // guards the vmmRegion states: Precommit commits beside the arena's lock
}

// vmmRegion is a VMM region's state: the physical allocation mapped at each granule.
type vmmRegion struct {
	handles []icuda.MemHandle
	mapped  bitmap
}

// newVMM checks the granularity of loc and makes the machinery.
func newVMM(b *cudaBase, loc icuda.Location, access []icuda.Location, what string) (*vmm, error) {
	g, err := b.dev.MemGetAllocationGranularityAt(loc)
	if err != nil {
		return nil, fmt.Errorf("%w: VMM allocation granularity of %s memory (location %+v) on device %d: %w",
			ErrInvalid, what, loc, b.dev.Ordinal(), err)
	}
	if !align.IsPow2(g) {
		return nil, fmt.Errorf("%w: %s VMM granularity %d on device %d is not a power of two", ErrInvalid, what, g, b.dev.Ordinal())
	}
	return &vmm{cudaBase: b, loc: loc, access: access, gran: g, what: what}, nil
}

// Caps implements Provider.
func (p *vmm) Caps() Caps {
	return Caps{Aligns: true, Decommits: true, ZeroOnCommit: p.zero, Granule: p.gran}
}

// Reserve implements Provider.
func (p *vmm) Reserve(size, alignment uintptr) (*Region, error) {
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
	return &Region{Base: base, Size: size, Zeroed: p.zero,
		Handle: &vmmRegion{handles: make([]icuda.MemHandle, ng), mapped: newBitmap(ng)}}, nil
}

func (p *vmm) state(r *Region, off, size uintptr) (*vmmRegion, error) {
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

// Commit implements Provider. Out of memory, it fails with an error wrapping ErrCommit,
// ErrExhausted and cuda.ErrOutOfMemory that says how much was asked and is free, and commits
// nothing.
func (p *vmm) Commit(r *Region, off, size uintptr) error {
	v, err := p.state(r, off, size)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	lo, hi := int(off/p.gran), int((off+size)/p.gran)
	for g := lo; g < hi; g++ {
		if err := p.mapGranule(r, v, g); err != nil {
			_ = p.unmapGranules(r, v, lo, g)
			if errors.Is(err, icuda.ErrOutOfMemory) { // after the undo, so the figures are current
				return p.driverError(ErrCommit, "cuMemCreate", size, err)
			}
			return err
		}
	}
	if err := p.call(nil, 0, p.dev.MemSetAccessAt(r.Base+off, size, p.access)); err != nil {
		_ = p.unmapGranules(r, v, lo, hi)
		return fmt.Errorf("%w: cuMemSetAccess of %d bytes of %s memory for %+v: %w", ErrCommit, size, p.what, p.access, err)
	}
	return nil
}

// mapGranule backs granule g with a new physical allocation. p.mu is held.
func (p *vmm) mapGranule(r *Region, v *vmmRegion, g int) error {
	if v.mapped.get(g) {
		return fmt.Errorf("%w: granule %d of region %#x is committed already", ErrInvalid, g, r.Base)
	}
	h, err := p.dev.MemCreateAt(p.gran, p.loc)
	if err = p.call(&p.handles, 1, err); err != nil {
		if errors.Is(err, icuda.ErrOutOfMemory) {
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

// unmapGranules unmaps and releases the mapped granules in [lo, hi), run by run. p.mu is held.
func (p *vmm) unmapGranules(r *Region, v *vmmRegion, lo, hi int) error {
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

// Decommit implements Provider: the range's granules are unmapped and their memory released.
func (p *vmm) Decommit(r *Region, off, size uintptr) error {
	v, err := p.state(r, off, size)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unmapGranules(r, v, int(off/p.gran), int((off+size)/p.gran))
}

// Release implements Provider: what is still mapped is unmapped, then the address range freed.
func (p *vmm) Release(r *Region) error {
	if r == nil {
		return fmt.Errorf("%w: nil region", ErrInvalid)
	}
	v, err := p.state(r, 0, r.Size)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.unmapGranules(r, v, 0, len(v.handles)); err != nil {
		return err
	}
	if err := p.call(&p.reservations, -1, p.dev.MemAddressFree(r.Base, r.Size)); err != nil {
		return fmt.Errorf("%w: cuMemAddressFree of %d bytes: %w", ErrInvalid, r.Size, err)
	}
	r.Handle = nil
	return nil
}
