package cudamem

// HostRegister: CUDA pinned host memory as mmap + cuMemHostRegister, the provider NewHost picks
// where the driver has no VMM host memory (before CUDA 12.2, or without host NUMA support).
// Choose it there, or where memory must come from mmap (huge pages, an address range of your
// own); where the driver has VMM host memory, HostVMM does the same without RLIMIT_MEMLOCK and
// without the registration invariant below.
//
// # The registration invariant
//
// The driver copies a host range by DMA only when the range lies inside ONE registration (a
// copy spanning two is refused with CUDA_ERROR_INVALID_VALUE, measured on an H100). So this
// provider keeps, at all times:
//
//  1. every committed byte is registered, and every registration covers committed whole
//     granules of one region;
//  2. every block a heap hands out lies inside one registration.
//
// (2) comes from the granule and from Join. The granule is a chunk (2 MiB): the arena commits
// and decommits whole chunks, so a heap segment (one chunk) is committed, registered and purged
// as one piece, and no page's blocks straddle two commits. A huge object is a span of chunks,
// committed when Alloc hands it out; the arena then calls Join for the span's granules, which
// makes them exactly one registration (merging the registrations of chunks that were
// committed already, and cutting off any registration that reached past the span). Commit
// (the heap reusing a range) joins the same way. A registration that Join or Decommit cuts
// holds no live block: registrations are made for one span's range, spans never share a chunk,
// and the pieces cut off lie in chunks no span has claimed since (see arena.Joiner).
//
// The cost of the invariant: a segment holding one small page commits and pins 2 MiB, not
// 64 KiB; the VMM host provider, whose granule is 2 MiB as well, pays the same.
//
// # Pinning fast
//
// A registration spends its time faulting in and pinning the pages it covers, on one thread. The
// provider is an arena.Prefaulter: for a big span the arena first faults the span's pieces in on
// its workers (Prefault: arena.HostProvider.FaultIn, MADV_POPULATE_WRITE, which takes the mm's lock
// for reading only, so the pieces fault side by side), then registers the span in one call that
// finds its pages present; Precommit registers chunk by chunk, several chunks at once. The driver
// calls run outside p.mu, which guards the record of registrations: Commit registers a range no
// other call touches (the arena commits disjoint ranges), and records it afterwards. A commit that
// fails leaves nothing registered and the range's pages dropped again.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/numa"
)

// regGranule is the registration provider's granule: one chunk.
const regGranule = arena.DefaultChunkSize

// registerFlags maps registrations into the device's address space for every context.
const registerFlags = icuda.HostRegisterPortable | icuda.HostRegisterDeviceMap

// HostRegister hands out pinned host memory: anonymous memory mapped as the pageable
// arena.HostProvider maps it (arena.PinnableHost: over-reserved and trimmed, so regions are aligned
// for free; PROT_NONE until committed), registered with cuMemHostRegister when committed and
// unregistered when decommitted, under the registration invariant above. Registration pins the
// pages itself, so nothing is mlocked and RLIMIT_MEMLOCK does not apply. Copies between a block
// of this memory and any device run by DMA at full bandwidth, and the device can address it
// directly (DevicePointer). It is the fallback of NewHost on drivers without VMM host memory.
type HostRegister struct {
	cudaBase
	host *arena.HostProvider
	page uintptr // the mapping's page: every range a call takes starts and ends on one

	mu sync.Mutex
	// live, by base: the regions reserved and not released. A region is the provider's only
	// while it is the one on record at its base: the kernel maps a later region at a base
	// released before, and a stale or another provider's region must touch nothing of it.
	live map[uintptr]*arena.Region
	regs map[uintptr][]hostReg // by region base: its registrations, sorted by offset, disjoint
	// holes, by region base: committed ranges the driver refused to register again, sorted,
	// disjoint from regs (hostregister_holes.go).
	holes map[uintptr][]hostReg
	// busy counts the calls on a region in flight outside p.mu (Commit, Prefault, Decommit's
	// munmap side): Release, once it has claimed the region, waits for them (idle, on p.mu).
	busy map[*arena.Region]int
	idle sync.Cond
}

// hostReg is one registration: [off, off+size) from its region's base.
type hostReg struct{ off, size uintptr }

func (g hostReg) end() uintptr { return g.off + g.size }

// NewHostRegister returns a provider of host memory pinned by registration with the CUDA driver of
// dev. o.HugePages applies as for the host providers, but arena.HugeNone (the default) means
// arena.HugeTransparent here: registered memory is committed in whole 2 MiB chunks and pinned for
// as long, so transparent huge pages cost no memory, and faulting a 1 GiB span in took about half
// the time with them (130–224 against 281–400 ms at one worker, three runs of bench -commit
// register-span on the loaded 2-vCPU build machine), decommitting it a fifteenth to a twentieth (3
// against 40–67 ms); arena.HugeSmall keeps 4 KiB pages. With o.Populate each region is committed
// and registered whole when reserved. o.NUMA binds the mappings (mbind, strictly: a registration
// faults every page in at once) to the node asked for, or by default to the node nearest the device
// when a source knows it (DeviceNode); o.Node is not used. o.Devices does not apply: a registration
// is portable to every device.
func NewHostRegister(dev *cuda.Device, o HostOptions) (*HostRegister, error) {
	p := &HostRegister{live: map[uintptr]*arena.Region{}, regs: map[uintptr][]hostReg{},
		holes: map[uintptr][]hostReg{}, busy: map[*arena.Region]int{}}
	p.idle.L = &p.mu
	if err := p.cudaBase.init(dev, "cuda-host-register", arena.HostPinned); err != nil {
		return nil, err
	}
	b := &p.cudaBase
	ho := o.HostOptions
	ho.Node = o.NUMA
	if ho.HugePages == arena.HugeNone {
		ho.HugePages = arena.HugeTransparent
	}
	if o.NUMA == arena.NUMANearest {
		// The node nearest the device, when a source knows it and the kernel has it online (a
		// driver naming a node the kernel lacks is a broken host: placement is left to it).
		if n, _, ok := deviceNode(b.dev); ok && slices.Contains(numa.Online(sysfsRoot), n) {
			ho.Node = arena.NUMANode(n)
		}
	}
	if n, asked := ho.Node.Node(); asked && !slices.Contains(numa.Online(sysfsRoot), n) {
		return nil, fmt.Errorf("%w: NUMA node %d: the machine has nodes %v", arena.ErrInvalid, n, numa.Online(sysfsRoot))
	}
	p.host = arena.PinnableHost(ho)
	p.page = p.host.Caps().Granule
	return p, nil
}

// Node implements arena.Placer: the node the mappings are bound to, or arena.NodeUnknown.
func (p *HostRegister) Node() int { return p.host.Node() }

// Caps implements arena.Provider: those of the host mapping underneath, with a granule of a chunk.
func (p *HostRegister) Caps() arena.Caps {
	c := p.host.Caps()
	c.Granule = max(c.Granule, regGranule)
	return c
}

// HostCounters returns the system calls made for the mappings.
func (p *HostRegister) HostCounters() arena.HostCounters { return p.host.Counters() }

// Report implements arena.Reporter: the driver's counters and the mappings' system calls.
func (p *HostRegister) Report() arena.ProviderStats {
	s := p.cudaBase.Report()
	h := p.host.Counters()
	s.Syscalls, s.HugeTLBFallbacks = h.Total(), h.HugeTLBFallbacks
	return s
}

// ReleaseKept implements arena.KeptReleaser: it unmaps what the host mapping underneath kept
// when the kernel refused to unmap a failed Reserve's region, and returns the refusal while one
// lasts. Arena.Close calls it.
func (p *HostRegister) ReleaseKept() error { return p.host.ReleaseKept() }

// Reserve implements arena.Provider.
func (p *HostRegister) Reserve(size, alignment uintptr) (*arena.Region, error) {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	r, err := p.host.Reserve(size, max(alignment, regGranule))
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.live[r.Base] = r
	p.regs[r.Base] = nil
	p.mu.Unlock()
	if r.Committed { // populated: register it whole now, since Commit will never be called
		if err := p.register(r, hostReg{0, r.Size}); err != nil {
			_ = p.Release(r)
			return nil, err
		}
	}
	return r, nil
}

// Commit implements arena.Provider: the range is made accessible, then registered as one.
func (p *HostRegister) Commit(r *arena.Region, off, size uintptr) error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	if err := p.pages(r, off, size); err != nil {
		return err
	}
	if err := p.enter(r); err != nil {
		return err
	}
	defer p.leave(r)
	if err := p.host.Commit(r, off, size); err != nil {
		return err
	}
	if err := p.register(r, hostReg{off, size}); err != nil {
		_ = p.host.Decommit(r, off, size)
		return err
	}
	return nil
}

// Prefault implements arena.Prefaulter: [off, off+size) is made accessible and its pages faulted in
// (written, so that each is a page of its own and not the shared zero page), without a
// registration. Decommit undoes it.
func (p *HostRegister) Prefault(r *arena.Region, off, size uintptr) error {
	if err := p.pages(r, off, size); err != nil {
		return err
	}
	if err := p.enter(r); err != nil {
		return err
	}
	defer p.leave(r)
	if err := p.host.Commit(r, off, size); err != nil {
		return err
	}
	if err := p.host.FaultIn(r.Base+off, size); err != nil {
		_ = p.host.Decommit(r, off, size)
		return err
	}
	return nil
}

// Join implements arena.Joiner: [off, off+size), committed, becomes exactly one registration. When
// it is one already (the common case: a segment's chunk, a span committed in one piece) no
// driver call is made.
func (p *HostRegister) Join(r *arena.Region, off, size uintptr) error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	if err := p.pages(r, off, size); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.mine(r); err != nil {
		return err
	}
	p.mend(r)
	regs := p.regs[r.Base]
	lo, hi := overlapping(regs, off, size)
	if hi-lo == 1 && regs[lo] == (hostReg{off, size}) {
		return nil
	}
	if err := p.cut(r, off, size, forCommit); err != nil {
		return err
	}
	// Now only registrations inside the range overlap it: undo them, register the range.
	regs = p.regs[r.Base]
	lo, hi = overlapping(regs, off, size)
	inside := append([]hostReg(nil), regs[lo:hi]...)
	if err := p.unregisterAll(r, inside, forCommit); err != nil {
		return err
	}
	if err := p.registerLocked(r, hostReg{off, size}); err != nil {
		rerrs := err
		for _, g := range inside { // put back what was there: committed memory stays registered
			if rerr := p.registerLocked(r, g); rerr != nil {
				rerrs = p.hole(r, g, fmt.Errorf("%w; registering [%#x, +%d) again: %w", rerrs, r.Base+g.off, g.size, rerr))
			}
		}
		return rerrs
	}
	p.dropHoles(r, off, size)
	return nil
}

// Decommit implements arena.Provider: the range is unregistered, then its pages dropped. When
// the driver refuses to unregister a part, the range stays committed and registered whole, as
// the arena then takes it to be; a part the driver then refuses to register again stays
// committed and counted, and is registered again at the next Join or Decommit of the region.
// Once unregistered the range is no longer committed: when dropping its pages fails after, the
// error wraps arena.ErrDecommitUnfinished.
func (p *HostRegister) Decommit(r *arena.Region, off, size uintptr) error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	if err := p.pages(r, off, size); err != nil {
		return err
	}
	p.mu.Lock()
	if err := p.mine(r); err != nil {
		p.mu.Unlock()
		return err
	}
	p.busy[r]++ // until the pages are dropped, outside p.mu
	defer p.leave(r)
	p.mend(r)
	err := p.cut(r, off, size, forGiveBack)
	if err == nil {
		regs := p.regs[r.Base]
		lo, hi := overlapping(regs, off, size)
		err = p.unregisterAll(r, append([]hostReg(nil), regs[lo:hi]...), forGiveBack)
	}
	if err == nil {
		p.dropHoles(r, off, size)
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := p.host.Decommit(r, off, size); err != nil {
		// Unregistered already, so no longer committed (pinned), whatever the host left undone.
		return fmt.Errorf("%w: %w", arena.ErrDecommitUnfinished, err)
	}
	return nil
}

// Release implements arena.Provider. Registrations left (a populated region, a range whose
// decommit the driver refused) are undone first. When the driver refuses to undo one, Release
// returns an error wrapping arena.ErrCommit (arena.GiveBackRefused) and the driver's, and
// keeps the region mapped with the registrations it could not undo on record: a later Release
// of the region tries again. It claims the region first: a Release of it racing this one, or a
// Commit, Prefault, Join or Decommit of it that comes later, is refused with arena.ErrInvalid;
// one in flight at the claim (a misuse: the arena never makes them at once) is waited for, and
// what it registered undone.
func (p *HostRegister) Release(r *arena.Region) error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	p.mu.Lock()
	if err := p.mine(r); err != nil {
		p.mu.Unlock()
		return err
	}
	// Claimed: out of live, under the lock, so that a Release racing this one, or a call on
	// the region that comes later, is refused, never a second munmap of a range a Reserve may
	// have mapped again in between. The calls in flight are waited for.
	delete(p.live, r.Base)
	if p.busy[r] > 0 && hostRegisterReleaseWaitHook != nil {
		p.mu.Unlock()
		hostRegisterReleaseWaitHook()
		p.mu.Lock()
	}
	for p.busy[r] > 0 {
		p.idle.Wait()
	}
	var errs []error
	for _, g := range append([]hostReg(nil), p.regs[r.Base]...) {
		if err := p.unregisterOne(r, g, forGiveBack); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		p.live[r.Base] = r // kept: still mapped, so no other region there
		p.mu.Unlock()
		return fmt.Errorf("region [%#x, +%d) kept for a later release: %w", r.Base, r.Size, errors.Join(errs...))
	}
	p.dropHoles(r, 0, r.Size)
	delete(p.regs, r.Base)
	delete(p.holes, r.Base)
	p.mu.Unlock()
	if releaseUnmapHook != nil {
		releaseUnmapHook()
	}
	if err := p.host.Release(r); err != nil {
		p.mu.Lock()
		p.live[r.Base] = r // still mapped, so no other region there: a later Release tries again
		p.mu.Unlock()
		return err
	}
	return nil
}

// releaseUnmapHook, when set (by tests), runs in HostRegister.Release between its registrations'
// removal and its munmap.
var releaseUnmapHook func()

// hostRegisterReleaseWaitHook, when set (by tests), runs in HostRegister.Release when, the region
// claimed, it waits for a call on it in flight.
var hostRegisterReleaseWaitHook func()

// Zero implements arena.Zeroer, with the CPU.
func (p *HostRegister) Zero(addr, size uintptr) error { return hostZero(addr, size) }

// DevicePointer returns the address at which a device sees host address addr, which must lie
// in registered memory of the provider. With unified addressing (every 64-bit platform CUDA
// supports) it is addr itself, but kernels should be given what this returns.
func (p *HostRegister) DevicePointer(addr uintptr) (cuda.DevicePtr, error) {
	return p.devicePointer(addr)
}

// RegistrationOf returns the registered range [base, base+size) holding addr, for tests of the
// registration invariant; ok is false when addr is not registered.
func (p *HostRegister) RegistrationOf(addr uintptr) (base, size uintptr, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for rb, regs := range p.regs {
		for _, g := range regs {
			if addr-rb-g.off < g.size && addr >= rb {
				return rb + g.off, g.size, true
			}
		}
	}
	return 0, 0, false
}

// known returns nil when r is a live region of the provider, else an error wrapping
// arena.ErrInvalid: a region released already, or reserved by another provider, must touch
// nothing (a live region may lie at its base).
func (p *HostRegister) known(r *arena.Region) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mine(r)
}

// pages checks that [off, off+size) lies in r and starts and ends on a page of the mapping
// (the arena's ranges are whole chunks): a registration, an mprotect and a madvise take whole
// pages, and a range cut inside one would leave two registrations of a page.
func (p *HostRegister) pages(r *arena.Region, off, size uintptr) error {
	if err := r.CheckRange(off, size); err != nil {
		return err
	}
	if off%p.page != 0 || size%p.page != 0 {
		return fmt.Errorf("%w: range [%d, +%d) of region %#x is not page-aligned (%d)",
			arena.ErrInvalid, off, size, r.Base, p.page)
	}
	return nil
}

// enter checks, as known, that r is a live region of the provider, and counts a call on it in
// flight until leave: a Release that claims r meanwhile waits for it.
func (p *HostRegister) enter(r *arena.Region) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.mine(r); err != nil {
		return err
	}
	p.busy[r]++
	return nil
}

// leave ends a call on r that enter (or Decommit, under p.mu) counted.
func (p *HostRegister) leave(r *arena.Region) {
	p.mu.Lock()
	if p.busy[r]--; p.busy[r] == 0 {
		delete(p.busy, r)
		p.idle.Broadcast()
	}
	p.mu.Unlock()
}

// mine is known with p.mu held.
func (p *HostRegister) mine(r *arena.Region) error {
	if r == nil {
		return fmt.Errorf("%w: nil region", arena.ErrInvalid)
	}
	if p.live[r.Base] != r {
		return fmt.Errorf("%w: region [%#x, +%d) not from this provider, or released", arena.ErrInvalid, r.Base, r.Size)
	}
	return nil
}

// overlapping returns the indexes [lo, hi) of the registrations in regs (sorted, disjoint)
// that overlap [off, off+size).
func overlapping(regs []hostReg, off, size uintptr) (lo, hi int) {
	lo = sort.Search(len(regs), func(i int) bool { return regs[i].end() > off })
	hi = lo
	for hi < len(regs) && regs[hi].off < off+size {
		hi++
	}
	return lo, hi
}

// cut makes sure no registration crosses off or off+size: one that does is undone and its
// parts on each side registered again. A refused unregistration is told in the words of s, the
// call cut is part of. p.mu is held.
func (p *HostRegister) cut(r *arena.Region, off, size uintptr, s side) error {
	for _, at := range []uintptr{off, off + size} {
		regs := p.regs[r.Base]
		i := sort.Search(len(regs), func(i int) bool { return regs[i].end() > at })
		if i == len(regs) || regs[i].off >= at {
			continue // no registration holds the byte before at and the one at it both
		}
		g := regs[i]
		if err := p.unregisterOne(r, g, s); err != nil {
			return err
		}
		left, right := hostReg{g.off, at - g.off}, hostReg{at, g.end() - at}
		err := p.registerLocked(r, left)
		if err == nil {
			if err = p.registerLocked(r, right); err != nil {
				if uerr := p.unregisterOne(r, left, s); uerr != nil { // left stays registered
					return p.hole(r, right, fmt.Errorf("%w; undoing [%#x, +%d): %w", err, r.Base+left.off, left.size, uerr))
				}
			}
		}
		if err != nil {
			if rerr := p.registerLocked(r, g); rerr != nil { // put it back whole
				return p.hole(r, g, fmt.Errorf("%w; registering it whole again: %w", err, rerr))
			}
			return err
		}
	}
	return nil
}

// register registers g of r, a range no registration overlaps and no other call touches, with
// the driver call outside p.mu, and records it under p.mu.
func (p *HostRegister) register(r *arena.Region, g hostReg) error {
	if err := p.known(r); err != nil {
		return err
	}
	if err := p.registerCall(r, g); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.record(r, g)
	return nil
}

// registerCall registers g of r with the driver. On failure it returns an error wrapping
// arena.ErrCommit and the driver's (and arena.ErrExhausted when the driver is out of memory).
func (p *HostRegister) registerCall(r *arena.Region, g hostReg) error {
	if err := p.call(&p.registrations, 1, p.dev.MemHostRegister(r.Base+g.off, g.size, registerFlags)); err != nil {
		return p.driverError(arena.ErrCommit, "cuMemHostRegister", g.size, err)
	}
	return nil
}

// registerLocked registers g of r and records it; p.mu is held (Join and cut, which undo and
// redo registrations of one span, keep the record consistent throughout).
func (p *HostRegister) registerLocked(r *arena.Region, g hostReg) error {
	if err := p.registerCall(r, g); err != nil {
		return err
	}
	p.record(r, g)
	return nil
}

// record adds registration g of r to the record. p.mu is held.
func (p *HostRegister) record(r *arena.Region, g hostReg) {
	p.regs[r.Base] = insertReg(p.regs[r.Base], g)
	p.committed.Add(int64(g.size))
}

// insertReg inserts g in gs, sorted by offset.
func insertReg(gs []hostReg, g hostReg) []hostReg {
	i := sort.Search(len(gs), func(i int) bool { return gs[i].off > g.off })
	return slices.Insert(gs, i, g)
}

// unregisterAll undoes the registrations gs of r, in order. When the driver refuses one, those
// undone already are registered again, so that the committed range stays registered as the
// caller's caller (the arena, which keeps a refused range committed) takes it to be, and the
// refusal is returned, in the words of s; one the driver refuses to register again is kept as a
// hole. p.mu is held.
func (p *HostRegister) unregisterAll(r *arena.Region, gs []hostReg, s side) error {
	for i, g := range gs {
		if err := p.unregisterOne(r, g, s); err != nil {
			for _, u := range gs[:i] {
				if rerr := p.registerLocked(r, u); rerr != nil {
					err = p.hole(r, u, fmt.Errorf("%w; registering [%#x, +%d) again: %w", err, r.Base+u.off, u.size, rerr))
				}
			}
			return err
		}
	}
	return nil
}

// side says what call undoes a registration: a commit (Join, which merges and cuts
// registrations to make one of a span) or a give-back (Decommit, Release). The driver's refusal
// to undo it is told in that call's words; it matches arena.ErrCommit either way.
type side bool

const (
	forCommit   side = false
	forGiveBack side = true
)

// unregisterOne undoes registration g of r and forgets it. When the driver refuses, the error
// says that memory could not be committed (s forCommit) or given back (forGiveBack). p.mu is
// held.
func (p *HostRegister) unregisterOne(r *arena.Region, g hostReg, s side) error {
	if err := p.call(&p.registrations, -1, p.dev.MemHostUnregister(r.Base+g.off)); err != nil {
		err = fmt.Errorf("cuMemHostUnregister at %#x: %w", r.Base+g.off, err)
		if s == forGiveBack {
			return arena.GiveBackRefused(err)
		}
		return fmt.Errorf("%w: %w", arena.ErrCommit, err)
	}
	p.committed.Add(-int64(g.size))
	regs := p.regs[r.Base]
	for i, x := range regs {
		if x == g {
			p.regs[r.Base] = append(regs[:i], regs[i+1:]...)
			break
		}
	}
	return nil
}
