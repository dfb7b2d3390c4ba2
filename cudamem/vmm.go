package cudamem

// The CUDA virtual memory management API, shared by the device VMM provider (DeviceVMM)
// and the host VMM provider (HostVMM): they differ only in where the physical
// memory lives (the location given to cuMemCreate) and who is granted access to it.
//
// A region is one reservation of address space (cuMemAddressReserve). Each granule of it is
// backed by its own physical allocation: Commit creates one per granule (cuMemCreate), maps
// each (cuMemMap) and grants access to the whole range at once (cuMemSetAccess); Decommit
// unmaps the range (cuMemUnmap) and releases the granules' allocations (cuMemRelease). One
// allocation per granule is what makes decommit possible: the driver refuses to unmap part of
// a mapping. Consecutive mapped granules with access granted are one range for copies, so any
// run of committed granules can be copied in one call.
//
// Granules are independent, so a range commits and decommits in pieces on several goroutines
// (arena.Caps.Splits; the arena's workers). The driver calls run outside p.mu, which guards only the
// record of what is mapped: a commit checks its granules are unmapped, calls the driver, and
// records what it mapped; a decommit claims its granules (clears them in the record), calls the
// driver, and puts back what the driver refused to unmap. The arena never commits or
// decommits overlapping ranges at once, so no two calls race for a granule. A commit that fails
// midway unmaps and releases what it mapped before it returns: the driver holds nothing of it.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/align"
	"github.com/pinmalloc/pinmalloc/internal/bitset"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// vmm is the VMM machinery of a provider: the physical location, the locations granted access,
// and the granule.
type vmm struct {
	cudaBase
	loc    cuda.Location       // where cuMemCreate puts the memory
	access []icuda.MemLocation // who may read and write it, as cuMemSetAccess takes them
	gran   uintptr
	what   string // "device" or "host", for errors
	zero   bool   // a fresh physical allocation reads as zero (measured for host memory)

	mu sync.Mutex // guards the vmmRegion records (not held across driver calls)
}

// vmmRegion is a VMM region's state: the physical allocation mapped at each granule.
type vmmRegion struct {
	handles []icuda.MemHandle
	mapped  bitset.Set
}

// init checks the granularity of loc and sets up the machinery, its cudaBase set up already.
func (v *vmm) init(loc cuda.Location, access []cuda.Location, what string) error {
	b := &v.cudaBase
	g, err := b.dev.MemGetAllocationGranularityAt(memLocation(loc))
	if err != nil {
		return fmt.Errorf("%w: VMM allocation granularity of %s memory (location %+v) on device %d: %w",
			arena.ErrInvalid, what, loc, b.dev.Ordinal(), err)
	}
	if !align.IsPow2(g) {
		return fmt.Errorf("%w: %s VMM granularity %d on device %d is not a power of two", arena.ErrInvalid, what, g, b.dev.Ordinal())
	}
	locs := make([]icuda.MemLocation, len(access))
	for i, l := range access {
		locs[i] = memLocation(l)
	}
	v.loc, v.access, v.gran, v.what = loc, locs, g, what
	return nil
}

// Caps implements arena.Provider.
func (p *vmm) Caps() arena.Caps {
	return arena.Caps{Aligns: true, Decommits: true, ZeroOnCommit: p.zero, Granule: p.gran, Splits: true}
}

// Reserve implements arena.Provider.
func (p *vmm) Reserve(size, alignment uintptr) (*arena.Region, error) {
	n, err := align.Up(size, p.gran)
	if err != nil || n == 0 || !align.IsPow2(alignment) {
		return nil, fmt.Errorf("%w: reserve %d bytes aligned to %d", arena.ErrInvalid, size, alignment)
	}
	size = n
	base, err := p.dev.MemAddressReserve(size, max(alignment, p.gran))
	if err = p.call(&p.reservations, 1, err); err != nil {
		return nil, p.driverError(arena.ErrReserve, "cuMemAddressReserve", size, err)
	}
	ng := int(size / p.gran)
	return &arena.Region{Base: base, Size: size, Zeroed: p.zero,
		Handle: &vmmRegion{handles: make([]icuda.MemHandle, ng), mapped: bitset.New(ng)}}, nil
}

func (p *vmm) state(r *arena.Region, off, size uintptr) (*vmmRegion, error) {
	if err := r.CheckRange(off, size); err != nil {
		return nil, err
	}
	v, ok := r.Handle.(*vmmRegion)
	if !ok {
		return nil, fmt.Errorf("%w: region not from this provider or released", arena.ErrInvalid)
	}
	if off%p.gran != 0 || size%p.gran != 0 {
		return nil, fmt.Errorf("%w: range [%d, +%d) is not granule-aligned (%d)", arena.ErrInvalid, off, size, p.gran)
	}
	return v, nil
}

// Commit implements arena.Provider. Out of memory, it fails with an error wrapping arena.ErrCommit,
// arena.ErrExhausted and cuda.ErrOutOfMemory that says how much was asked and is free, and commits
// nothing.
func (p *vmm) Commit(r *arena.Region, off, size uintptr) error {
	v, err := p.state(r, off, size)
	if err != nil {
		return err
	}
	lo, hi := int(off/p.gran), int((off+size)/p.gran)
	p.mu.Lock()
	busy := v.mapped.Count(lo, hi)
	p.mu.Unlock()
	if busy != 0 {
		return fmt.Errorf("%w: %d granules of [%d, %d) of region %#x are committed already", arena.ErrInvalid, busy, lo, hi, r.Base)
	}
	hs := make([]icuda.MemHandle, hi-lo)
	for g := lo; g < hi; g++ {
		if err := p.mapGranule(r, g, &hs[g-lo]); err != nil {
			_, _ = p.unmap(r, lo, hs[:g-lo])
			if errors.Is(err, pinmalloc.ErrOutOfMemory) { // after the undo, so the figures are current
				return p.driverError(arena.ErrCommit, "cuMemCreate", size, err)
			}
			return err
		}
	}
	if err := p.call(nil, 0, p.dev.MemSetAccessAt(r.Base+off, size, p.access)); err != nil {
		_, _ = p.unmap(r, lo, hs)
		return fmt.Errorf("%w: cuMemSetAccess of %d bytes of %s memory for %+v: %w", arena.ErrCommit, size, p.what, p.access, err)
	}
	p.mu.Lock()
	copy(v.handles[lo:hi], hs)
	v.mapped.SetRange(lo, hi, true)
	p.mu.Unlock()
	p.committed.Add(int64(size))
	return nil
}

// mapGranule backs granule g with a new physical allocation, whose handle it stores in *h.
func (p *vmm) mapGranule(r *arena.Region, g int, h *icuda.MemHandle) error {
	m, err := p.dev.MemCreateAt(p.gran, memLocation(p.loc))
	if err = p.call(&p.handles, 1, err); err != nil {
		if errors.Is(err, pinmalloc.ErrOutOfMemory) {
			return err // Commit explains it
		}
		return p.driverError(arena.ErrCommit, "cuMemCreate", p.gran, err)
	}
	if err := p.call(nil, 0, p.dev.MemMap(r.Base+uintptr(g)*p.gran, p.gran, m)); err != nil {
		_ = p.call(&p.handles, -1, p.dev.MemRelease(m))
		return fmt.Errorf("%w: cuMemMap of %d bytes: %w", arena.ErrCommit, p.gran, err)
	}
	*h = m
	return nil
}

// unmap unmaps granules [lo, lo+len(hs)), mapped with the handles hs, in one call, and releases
// the handles. It touches no record. mapped reports that the driver refused the unmap (the
// granules are still mapped, their handles held); otherwise an error is a refused release.
func (p *vmm) unmap(r *arena.Region, lo int, hs []icuda.MemHandle) (mapped bool, err error) {
	if len(hs) == 0 {
		return false, nil
	}
	n := uintptr(len(hs)) * p.gran
	if err := p.call(nil, 0, p.dev.MemUnmap(r.Base+uintptr(lo)*p.gran, n)); err != nil {
		return true, fmt.Errorf("%w: cuMemUnmap of %d bytes: %w", arena.ErrCommit, n, err)
	}
	var errs []error
	for _, h := range hs {
		if err := p.call(&p.handles, -1, p.dev.MemRelease(h)); err != nil {
			errs = append(errs, fmt.Errorf("%w: cuMemRelease: %w", arena.ErrCommit, err))
		}
	}
	return false, errors.Join(errs...)
}

// unmapGranules unmaps and releases the mapped granules in [lo, hi), run by run: each run is
// claimed under p.mu, unmapped without it, and put back if the driver refuses the unmap.
func (p *vmm) unmapGranules(r *arena.Region, v *vmmRegion, lo, hi int) error {
	type run struct {
		s  int
		hs []icuda.MemHandle
	}
	var rs []run
	p.mu.Lock()
	_ = v.mapped.Runs(lo, hi, true, func(s, e int) error {
		rs = append(rs, run{s, append([]icuda.MemHandle(nil), v.handles[s:e]...)})
		clear(v.handles[s:e])
		v.mapped.SetRange(s, e, false)
		return nil
	})

	p.mu.Unlock()
	var errs []error
	for i, x := range rs {
		mapped, err := p.unmap(r, x.s, x.hs)
		if !mapped {
			if err != nil {
				errs = append(errs, err) // a release refused: the handle is lost to us either way
			}
			p.committed.Add(-int64(uintptr(len(x.hs)) * p.gran))
			continue
		}
		// The unmap was refused: the runs from this one on are still mapped.
		p.mu.Lock()
		for _, y := range rs[i:] {
			copy(v.handles[y.s:], y.hs)
			v.mapped.SetRange(y.s, y.s+len(y.hs), true)
		}
		p.mu.Unlock()
		return errors.Join(append(errs, err)...)
	}
	return errors.Join(errs...)
}

// Decommit implements arena.Provider: the range's granules are unmapped and their memory released.
func (p *vmm) Decommit(r *arena.Region, off, size uintptr) error {
	v, err := p.state(r, off, size)
	if err != nil {
		return err
	}
	return p.unmapGranules(r, v, int(off/p.gran), int((off+size)/p.gran))
}

// Release implements arena.Provider: what is still mapped is unmapped, then the address range freed.
func (p *vmm) Release(r *arena.Region) error {
	if r == nil {
		return fmt.Errorf("%w: nil region", arena.ErrInvalid)
	}
	v, err := p.state(r, 0, r.Size)
	if err != nil {
		return err
	}
	if err := p.unmapGranules(r, v, 0, len(v.handles)); err != nil {
		return err
	}
	if err := p.call(&p.reservations, -1, p.dev.MemAddressFree(r.Base, r.Size)); err != nil {
		return fmt.Errorf("%w: cuMemAddressFree of %d bytes: %w", arena.ErrInvalid, r.Size, err)
	}
	r.Handle = nil
	return nil
}
