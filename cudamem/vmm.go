package cudamem

// The CUDA virtual memory management API, shared by the device VMM provider (DeviceVMM)
// and the host VMM provider (HostVMM): they differ only in where the physical
// memory lives (the location given to cuMemCreate) and who is granted access to it.
//
// A region is one reservation of address space (cuMemAddressReserve). Each granule of it is
// backed by its own physical allocation: Commit creates one per granule (cuMemCreate), maps
// each (cuMemMap) and grants access to the whole range at once (cuMemSetAccess); Decommit
// releases the granules' allocations (cuMemRelease) and unmaps the range (cuMemUnmap). One
// allocation per granule is what makes decommit possible: the driver refuses to unmap part of
// a mapping. Consecutive mapped granules with access granted are one range for copies, so any
// run of committed granules can be copied in one call.
//
// Granules are independent, so a range commits and decommits in pieces on several goroutines
// (arena.Caps.Splits; the arena's workers). The driver calls run outside p.mu, which guards only
// the record of what is mapped: a commit checks its granules are unmapped, calls the driver, and
// records what it mapped; a decommit claims its granules (clears them in the record), calls the
// driver, and puts back what the driver refused to give back. The arena never commits or decommits
// overlapping ranges at once, so no two calls race for a granule. A commit that fails midway unmaps
// and releases what it mapped before it returns: the driver holds nothing of it (a handle whose
// release the driver refuses is kept and released again by the next commit or region release). A
// region release the driver refuses keeps the region for a later one. A release claims its
// region first, so that a Commit, Decommit or Release of it that comes later is refused, and
// waits for the Commits and Decommits of it in flight (only a misuse makes them race).
//
// A decommit releases the granules' handles first and unmaps them last (the driver frees a
// released allocation with its last mapping), so that a decommit the driver refuses leaves the
// whole range mapped: the arena keeps a refused range as committed memory and hands it out
// again without a commit. A granule released but still mapped keeps a zero handle on record,
// and the next decommit only unmaps it.

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
	mloc   icuda.MemLocation   // loc as the driver takes it
	access []icuda.MemLocation // who may read and write it, as cuMemSetAccess takes them
	gran   uintptr
	what   string // "device" or "host", for errors
	zero   bool   // a fresh physical allocation reads as zero (measured for host memory)

	mu       sync.Mutex        // guards the vmmRegion records, a region's Handle, stranded and orphans (not held across driver calls)
	idle     sync.Cond         // on mu: broadcast when a region's last Commit or Decommit in flight ends
	stranded []icuda.MemHandle // handles unmapped whose release the driver refused: released again later
	orphans  []*arena.Region   // regions no arena took whose release the driver refused: released again later
}

// vmmRegion is a VMM region's state: the physical allocation mapped at each granule.
type vmmRegion struct {
	owner   *vmm // the provider that reserved it: no other one commits, decommits or releases it
	handles []icuda.MemHandle
	mapped  bitset.Set
	// stray: mapped granules a failed commit could not unmap (its undo's cuMemUnmap refused),
	// which the arena takes for uncommitted: the next commit over them unmaps them first (and
	// so does one refused for committed granules beside them), HostVMM.DevicePointer refuses
	// them as uncommitted, and a Release the driver refuses keeps them stray.
	stray bitset.Set
	// busy counts the Commits and Decommits of the region in flight, under owner.mu: Release
	// waits for them once it has claimed the region, which refuses later ones.
	busy int
}

// init checks the granularity of loc and sets up the machinery, its cudaBase set up already.
func (v *vmm) init(loc cuda.Location, access []cuda.Location, what string) error {
	b := &v.cudaBase
	mloc, err := memLocation(loc)
	if err != nil {
		return err
	}
	locs := make([]icuda.MemLocation, len(access))
	for i, l := range access {
		if locs[i], err = memLocation(l); err != nil {
			return fmt.Errorf("%w (a device given access)", err)
		}
	}
	g, err := b.dev.MemGetAllocationGranularityAt(mloc)
	if err != nil {
		return fmt.Errorf("%w: VMM allocation granularity of %s memory (location %+v) on device %d: %w",
			arena.ErrInvalid, what, loc, b.dev.Ordinal(), err)
	}
	if !align.IsPow2(g) {
		return fmt.Errorf("%w: %s VMM granularity %d on device %d is not a power of two", arena.ErrInvalid, what, g, b.dev.Ordinal())
	}
	v.loc, v.mloc, v.access, v.gran, v.what = loc, mloc, locs, g, what
	v.idle.L = &v.mu
	return nil
}

// Caps implements arena.Provider.
func (p *vmm) Caps() arena.Caps {
	return arena.Caps{Aligns: true, Decommits: true, ZeroOnCommit: p.zero, Granule: p.gran, Splits: true}
}

// Reserve implements arena.Provider.
func (p *vmm) Reserve(size, alignment uintptr) (*arena.Region, error) {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
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
		Handle: &vmmRegion{owner: p, handles: make([]icuda.MemHandle, ng), mapped: bitset.New(ng), stray: bitset.New(ng)}}, nil
}

// state returns the state of r, a region of p not claimed by a Release, after checking that
// [off, off+size) is a run of its granules. p.mu is held.
func (p *vmm) state(r *arena.Region, off, size uintptr) (*vmmRegion, error) {
	if err := r.CheckRange(off, size); err != nil {
		return nil, err
	}
	v, ok := r.Handle.(*vmmRegion)
	if !ok || v.owner != p {
		return nil, fmt.Errorf("%w: region not from this provider or released", arena.ErrInvalid)
	}
	if off%p.gran != 0 || size%p.gran != 0 {
		return nil, fmt.Errorf("%w: range [%d, +%d) is not granule-aligned (%d)", arena.ErrInvalid, off, size, p.gran)
	}
	return v, nil
}

// enter returns the state of r for a Commit or Decommit of [off, off+size), counted in flight
// until leave: a Release that claims r meanwhile waits for it, and one that claimed r already
// has it refused (arena.ErrInvalid).
func (p *vmm) enter(r *arena.Region, off, size uintptr) (*vmmRegion, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, err := p.state(r, off, size)
	if err == nil {
		v.busy++
	}
	return v, err
}

// leave ends a Commit or Decommit of v that enter counted.
func (p *vmm) leave(v *vmmRegion) {
	p.mu.Lock()
	if v.busy--; v.busy == 0 {
		p.idle.Broadcast()
	}
	p.mu.Unlock()
}

// Commit implements arena.Provider. Out of memory, it fails with an error wrapping arena.ErrCommit,
// arena.ErrExhausted and cuda.ErrOutOfMemory that says how much was asked and is free, and commits
// nothing.
func (p *vmm) Commit(r *arena.Region, off, size uintptr) error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	v, err := p.enter(r, off, size)
	if err != nil {
		return err
	}
	defer p.leave(v)
	_ = p.releaseStranded() // what the driver refuses again stays stranded, for Release to report
	lo, hi := int(off/p.gran), int((off+size)/p.gran)
	p.mu.Lock()
	busy, stray := v.mapped.Count(lo, hi), v.stray.Count(lo, hi)
	p.mu.Unlock()
	if stray != 0 {
		// Left mapped by an earlier commit's refused undo: give them back now, or say why not
		// (refused again, they stay strays). Beside granules committed, which refuse the
		// commit below, too: what the driver holds for nothing goes back at once.
		if err := p.unmapGranules(r, v, v.stray, lo, hi); err != nil {
			return fmt.Errorf("%w: unmapping what an earlier failed commit left mapped: %w", arena.ErrCommit, err)
		}
		busy -= stray
	}
	if busy != 0 {
		return fmt.Errorf("%w: %d granules of [%d, %d) of region %#x are committed already", arena.ErrInvalid, busy, lo, hi, r.Base)
	}
	hs := make([]icuda.MemHandle, hi-lo)
	for g := lo; g < hi; g++ {
		if op, err := p.mapGranule(r, g, &hs[g-lo]); err != nil {
			p.undo(r, v, lo, hs[:g-lo])
			n := p.gran
			if errors.Is(err, pinmalloc.ErrOutOfMemory) {
				n = size // what was asked, told after the undo, so that the figures are current
			}
			return p.driverError(arena.ErrCommit, op, n, err)
		}
	}
	if err := p.call(nil, 0, p.dev.MemSetAccessAt(r.Base+off, size, p.access)); err != nil {
		p.undo(r, v, lo, hs)
		return fmt.Errorf("%w: cuMemSetAccess of %d bytes of %s memory for %+v: %w", arena.ErrCommit, size, p.what, p.access, err)
	}
	p.record(v, lo, hs)
	return nil
}

// undo gives back the granules from lo that a failed commit mapped with the handles hs, for
// the arena, which takes the range for uncommitted: so it unmaps them first, and a release the
// driver refuses then leaves the range unmapped all the same, its handle stranded (released
// again by the next commit or release). What the driver refuses to unmap stays on record as
// mapped, and stray, so that the next commit over it unmaps it first (the arena commits the
// range again) and Release unmaps it before it frees the reservation.
func (p *vmm) undo(r *arena.Region, v *vmmRegion, lo int, hs []icuda.MemHandle) {
	if len(hs) == 0 {
		return
	}
	if p.call(nil, 0, p.dev.MemUnmap(r.Base+uintptr(lo)*p.gran, uintptr(len(hs))*p.gran)) != nil {
		p.record(v, lo, hs)
		p.mu.Lock()
		v.stray.SetRange(lo, lo+len(hs), true)
		p.mu.Unlock()
		return
	}
	_ = p.release(hs)
}

// release releases the handles hs, unmapped; those the driver refuses are stranded.
func (p *vmm) release(hs []icuda.MemHandle) error {
	var errs []error
	for _, h := range hs {
		if err := p.call(&p.handles, -1, p.dev.MemRelease(h)); err != nil {
			p.mu.Lock()
			p.stranded = append(p.stranded, h)
			p.mu.Unlock()
			errs = append(errs, arena.GiveBackRefused(fmt.Errorf(
				"cuMemRelease of an unmapped granule (kept, released again later): %w", err)))
		}
	}
	return errors.Join(errs...)
}

// releaseStranded releases again the handles whose release the driver refused.
func (p *vmm) releaseStranded() error {
	p.mu.Lock()
	hs := p.stranded
	p.stranded = nil
	p.mu.Unlock()
	return p.release(hs)
}

// orphan gives back r, a region reserved for no arena in the end (a populated region whose
// commit failed); what the driver refuses to give back is kept, and released again by
// releaseOrphans.
func (p *vmm) orphan(r *arena.Region) error {
	err := p.Release(r)
	if err != nil {
		p.mu.Lock()
		p.orphans = append(p.orphans, r)
		p.mu.Unlock()
	}
	return err
}

// releaseOrphans releases again the regions whose release orphan could not make; those the
// driver refuses again stay orphans (counted in Counters), and their refusals are returned.
func (p *vmm) releaseOrphans() error {
	p.mu.Lock()
	rs := p.orphans
	p.orphans = nil
	p.mu.Unlock()
	var errs []error
	for _, r := range rs {
		errs = append(errs, p.orphan(r))
	}
	return errors.Join(errs...)
}

// ReleaseKept implements arena.KeptReleaser: it gives back what the provider kept, held by no
// region, after the driver refused to give it back (a populated region whose commit failed,
// a granule's handle whose release was refused), and destroys the streams it keeps for its
// clears. Arena.Close calls it; what the driver refuses again stays kept, and the
// error wraps arena.ErrCommit and the driver's.
func (p *vmm) ReleaseKept() error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	return errors.Join(p.releaseOrphans(), p.releaseStranded(), p.dropStreams())
}

// record puts the granules from lo, mapped with the handles hs (zero: released already), on
// record as mapped.
func (p *vmm) record(v *vmmRegion, lo int, hs []icuda.MemHandle) {
	p.mu.Lock()
	copy(v.handles[lo:], hs)
	v.mapped.SetRange(lo, lo+len(hs), true)
	p.mu.Unlock()
	p.committed.Add(int64(uintptr(len(hs)) * p.gran))
}

// mapGranule backs granule g with a new physical allocation, whose handle it stores in *h. On
// failure it returns the driver call that failed and the driver's error, for Commit to explain.
func (p *vmm) mapGranule(r *arena.Region, g int, h *icuda.MemHandle) (op string, err error) {
	m, err := p.dev.MemCreateAt(p.gran, p.mloc)
	if err = p.call(&p.handles, 1, err); err != nil {
		return "cuMemCreate", err
	}
	if err := p.call(nil, 0, p.dev.MemMap(r.Base+uintptr(g)*p.gran, p.gran, m)); err != nil {
		_ = p.release([]icuda.MemHandle{m})
		return "cuMemMap", err
	}
	*h = m
	return "", nil
}

// unmap gives back granules [lo, lo+len(hs)), mapped with the handles hs: it releases the
// handles (a zero one is released already), then unmaps the range in one call. It touches no
// record. An error means the driver refused a release or the unmap: the whole range is still
// mapped, and the handles released are zeroed in hs, so that a retry does not release them
// twice.
func (p *vmm) unmap(r *arena.Region, lo int, hs []icuda.MemHandle) error {
	if len(hs) == 0 {
		return nil
	}
	for i, h := range hs {
		if h == 0 {
			continue
		}
		if err := p.call(&p.handles, -1, p.dev.MemRelease(h)); err != nil {
			return arena.GiveBackRefused(fmt.Errorf("cuMemRelease: %w", err))
		}
		hs[i] = 0
	}
	n := uintptr(len(hs)) * p.gran
	if err := p.call(nil, 0, p.dev.MemUnmap(r.Base+uintptr(lo)*p.gran, n)); err != nil {
		return arena.GiveBackRefused(fmt.Errorf("cuMemUnmap of %d bytes: %w", n, err))
	}
	return nil
}

// unmapGranules unmaps and releases the granules in [lo, hi) that set holds (v.mapped: every
// mapped one; v.stray: those a failed commit left), run by run: each run is claimed under p.mu,
// given back without it, and put back on record, whole, if the driver refuses, its stray
// granules stray again.
func (p *vmm) unmapGranules(r *arena.Region, v *vmmRegion, set bitset.Set, lo, hi int) error {
	type run struct {
		s     int
		hs    []icuda.MemHandle
		stray []int // the run's stray granules, to put back so if refused
	}
	var rs []run
	claimed := 0
	p.mu.Lock()
	_ = set.Runs(lo, hi, true, func(s, e int) error {
		x := run{s: s, hs: append([]icuda.MemHandle(nil), v.handles[s:e]...)}
		if v.stray.Count(s, e) != 0 {
			for g := s; g < e; g++ {
				if v.stray.Get(g) {
					x.stray = append(x.stray, g)
				}
			}
		}
		rs = append(rs, x)
		clear(v.handles[s:e])
		v.mapped.SetRange(s, e, false)
		v.stray.SetRange(s, e, false)
		claimed += e - s
		return nil
	})
	p.mu.Unlock()
	p.committed.Add(-int64(uintptr(claimed) * p.gran))
	for i, x := range rs {
		if err := p.unmap(r, x.s, x.hs); err != nil {
			// Refused: the runs from this one on are still mapped.
			for _, y := range rs[i:] {
				p.record(v, y.s, y.hs)
				p.mu.Lock()
				for _, g := range y.stray {
					v.stray.SetRange(g, g+1, true)
				}
				p.mu.Unlock()
			}
			return err
		}
	}
	return nil
}

// Decommit implements arena.Provider: the range's granules are unmapped and their memory released.
func (p *vmm) Decommit(r *arena.Region, off, size uintptr) error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	v, err := p.enter(r, off, size)
	if err != nil {
		return err
	}
	defer p.leave(v)
	return p.unmapGranules(r, v, v.mapped, int(off/p.gran), int((off+size)/p.gran))
}

// Release implements arena.Provider: what is still mapped is unmapped, the handles stranded by
// refused releases are released, then the address range freed. It claims the region first: a
// Release of it racing this one, or after it, is refused with arena.ErrInvalid and frees nothing
// (the driver may have handed the address range to a new region by then), and so is a Commit or
// Decommit of it; one in flight at the claim (a misuse: the arena never makes them at once) is
// waited for, and what it mapped given back. When the driver refuses any of it, Release returns
// the refusal, wrapping arena.ErrCommit (arena.GiveBackRefused), and keeps the region, with what
// is still mapped or held on record: a later Release of it tries again.
func (p *vmm) Release(r *arena.Region) error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	if r == nil {
		return fmt.Errorf("%w: nil region", arena.ErrInvalid)
	}
	p.mu.Lock() // HostVMM.DevicePointer reads the Handle under this lock, for the regions of every arena
	v, err := p.state(r, 0, r.Size)
	if err == nil {
		r.Handle = nil
		if v.busy > 0 && vmmReleaseWaitHook != nil {
			p.mu.Unlock()
			vmmReleaseWaitHook()
			p.mu.Lock()
		}
		for v.busy > 0 {
			p.idle.Wait()
		}
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := p.freeRegion(r, v); err != nil {
		p.mu.Lock()
		r.Handle = v // kept, for a later Release
		p.mu.Unlock()
		return err
	}
	return nil
}

// freeRegion gives back region r, claimed by Release, whose state is v.
func (p *vmm) freeRegion(r *arena.Region, v *vmmRegion) error {
	if err := p.unmapGranules(r, v, v.mapped, 0, len(v.handles)); err != nil {
		return err
	}
	if err := p.releaseStranded(); err != nil {
		return err
	}
	if err := p.call(&p.reservations, -1, p.dev.MemAddressFree(r.Base, r.Size)); err != nil {
		return arena.GiveBackRefused(fmt.Errorf("cuMemAddressFree of %d bytes: %w", r.Size, err))
	}
	return nil
}

// vmmReleaseWaitHook, when set (by tests), runs in Release when it waits for a Commit or
// Decommit of the region in flight.
var vmmReleaseWaitHook func()
