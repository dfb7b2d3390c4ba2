package shared

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

var pageSize = uintptr(unix.Getpagesize())

// DefaultDrainInterval is how often a process takes in the frees other processes made of its
// blocks, when nothing asks sooner (Collect).
const DefaultDrainInterval = time.Millisecond

// Process is one process's side of a shared pool: the owner's (Owner embeds it) or an
// attached process's (Attach). It has an arena and a heap of its own over grants of the pool,
// so Alloc and Free of its own buffers touch nothing shared and cost what a heap's do. Its
// methods are safe for use from several goroutines.
type Process struct {
	layout
	pool    uint64
	slot    int
	c       ctl
	ctlBase uintptr
	ctlSize uintptr
	maps    []uintptr // each region's base in this process
	// registered says which regions are registered with dev; fallbacks are the refusals
	// that left regions pageable or unregistered (Options.FallbackPageable).
	registered []bool
	dev        *icuda.Device
	fallbacks  []string
	vmm        []vmmRegion // a VMM pool's regions
	granter    granter
	leave      func() error // after the heap is gone: detach from the pool
	ownerFd    int          // a pidfd of the owner, in an attached process; -1 in the owner
	fence      uint64       // the last fence epoch this process passed (the drainer's)

	mu sync.Mutex // the heap's owner: Alloc, own frees, Collect, Stats
	ar *arena.Arena
	h  *heap.Heap
	g  *heap.Group

	pushMu sync.Mutex // the producer side of this process's rings (the heap's lock is the consumer's)
	stop   chan struct{}
	done   chan struct{}
	closed atomic.Bool

	freesOut, freesIn, dropped, freeErrs atomic.Uint64
}

// newProcess maps the control region and the regions, builds the process's arena and heap,
// and starts its drainer. On error it unmaps what it mapped; the caller closes the fds.
func newProcess(h hello, ctlFd int, regionFds []int, cfg procConfig, drain time.Duration, g granter) (*Process, error) {
	p := &Process{layout: h.layout, pool: h.pool, slot: h.slot, ctlSize: h.ctlSize, granter: g, ownerFd: -1,
		stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	if p.ctlBase, err = mapFd(ctlFd, h.ctlSize, pageSize, lockNone); err != nil {
		return nil, err
	}
	p.c = ctl{layout: h.layout, w: words(p.ctlBase, h.ctlSize)}
	if err := p.mapRegions(regionFds, cfg); err != nil {
		p.unmapAll()
		return nil, err
	}
	p.ar, err = arena.New(arena.Options{Provider: &grantProvider{p}, Capacity: h.poolBytes(), RegionSize: h.grantSize, PurgeDelay: -1})
	if err == nil {
		p.h, err = heap.New(p.ar, heap.Options{Align: cfg.align})
	}
	if err != nil {
		p.unmapAll()
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	p.g = p.h.Group()
	if drain <= 0 {
		drain = DefaultDrainInterval
	}
	go p.drainer(drain)
	return p, nil
}

func (p *Process) unmapAll() {
	_ = p.unregisterAll()
	if len(p.vmm) > 0 {
		_ = p.unmapVMM()
	} else {
		for _, b := range p.maps {
			_ = unmap(b, p.regionSize)
		}
	}
	p.maps, p.registered = nil, nil
	if p.ctlBase != 0 {
		_ = unmap(p.ctlBase, p.ctlSize)
		p.ctlBase = 0
	}
}

// abandon stops the drainer and unmaps everything, for a process that failed to start.
func (p *Process) abandon() {
	p.closed.Store(true)
	close(p.stop)
	<-p.done
	p.unmapAll()
}

// ownerExited reports whether the pool's owner process has exited (never, in the owner).
func (p *Process) ownerExited() bool {
	if p.ownerFd < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(p.ownerFd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// Slot returns the process's number in the pool (the owner's is 0).
func (p *Process) Slot() int { return p.slot }

// Alloc returns a buffer of n bytes of the shared pool, owned by this process. Any attached
// process may read and write it through its Handle, and free it.
func (p *Process) Alloc(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: %d bytes", heap.ErrInvalidSize, n)
	}
	if p.closed.Load() {
		return nil, ErrClosed
	}
	p.mu.Lock()
	a, err := p.h.Alloc(uintptr(n))
	p.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return mem.Bytes(a, uintptr(n)), nil
}

// locate returns the region and offset of address a, or false when a is not in the pool.
func (p *Process) locate(a uintptr) (r int, off uintptr, ok bool) {
	for i, b := range p.maps {
		if a >= b && a-b < p.regionSize {
			return i, a - b, true
		}
	}
	return 0, 0, false
}

// Free gives back a buffer of the pool: one of this process's (a local free) or one another
// process owns, obtained through its handle (the free goes to the owner's ring; the owner
// takes it in within its drain interval, and counts, in Stats.RemoteFreeErrors, one that was
// not of a live buffer). The buffer may be reused at once: every stream that used it must
// have passed (a synchronize, or an event waited on) before Free; there is no FreeAsync
// across processes.
func (p *Process) Free(b []byte) error {
	if p.closed.Load() {
		return ErrClosed
	}
	a := mem.Addr(b)
	r, off, ok := p.locate(a)
	if !ok || len(b) == 0 {
		return fmt.Errorf("%w: %#x", ErrForeignHandle, a)
	}
	gen, slot := p.c.grant(p.grantAt(r, off))
	return p.free(r, off, gen, slot)
}

// free frees the block at offset off of region r, whose grant is of generation gen and owned
// by slot.
func (p *Process) free(r int, off uintptr, gen uint64, slot int) error {
	switch {
	case slot == p.slot:
		p.mu.Lock()
		err := p.h.Free(p.maps[r] + off)
		p.mu.Unlock()
		return err
	case slot < 0:
		return fmt.Errorf("%w: region %d offset %#x is in no process's memory", ErrStaleHandle, r, off)
	}
	poolOff := uintptr(r)*p.regionSize + off
	if poolOff&15 != 0 {
		return fmt.Errorf("%w: region %d offset %#x is not a block's start", heap.ErrInteriorPointer, r, off)
	}
	e := packEntry(poolOff, gen)
	g := p.grantAt(r, off)
	p.pushMu.Lock()
	defer p.pushMu.Unlock()
	for !p.c.push(p.slot, slot, e) {
		// The owner's ring is full: it takes entries in every drain interval. Wait, unless the
		// memory changes owner meanwhile (the owner died and its grants were taken back).
		if g2, s2 := p.c.grant(g); g2 != gen || s2 != slot {
			return fmt.Errorf("%w: region %d offset %#x", ErrStaleHandle, r, off)
		}
		if p.closed.Load() {
			return ErrClosed
		}
		if p.ownerExited() { // nobody will drain the ring nor take the memory back
			return fmt.Errorf("%w: the pool's owner exited", ErrClosed)
		}
		time.Sleep(50 * time.Microsecond)
	}
	p.freesOut.Add(1)
	return nil
}

// Handle returns the handle of a buffer of the pool: this process's own (b must be a whole
// live buffer, as Alloc returned it, or a prefix of it) or another's obtained by handle.
func (p *Process) Handle(b []byte) (Handle, error) {
	if p.closed.Load() {
		return Handle{}, ErrClosed
	}
	a := mem.Addr(b)
	r, off, ok := p.locate(a)
	if !ok || len(b) == 0 || off+uintptr(len(b)) > p.regionSize {
		return Handle{}, fmt.Errorf("%w: %#x", ErrForeignHandle, a)
	}
	gen, slot := p.c.grant(p.grantAt(r, off))
	if slot < 0 {
		return Handle{}, fmt.Errorf("%w: %#x is in no process's memory", ErrStaleHandle, a)
	}
	if slot == p.slot {
		p.mu.Lock()
		base, size, err := p.g.Block(a)
		p.mu.Unlock()
		if err != nil {
			return Handle{}, err
		}
		if base != a || uintptr(len(b)) > size {
			return Handle{}, fmt.Errorf("%w: [%#x, +%d) is not a whole buffer (block [%#x, +%d))", ErrForeignHandle, a, len(b), base, size)
		}
	}
	return Handle{Pool: p.pool, Region: uint32(r), Gen: uint32(gen), Offset: uint64(off), Length: uint64(len(b))}, nil
}

// check validates h against this pool and returns its region, offset and grant owner.
func (p *Process) check(h Handle) (r int, off uintptr, gen uint64, slot int, err error) {
	if h.Pool != p.pool || int(h.Region) >= p.regions || h.Length == 0 || h.Offset >= uint64(p.regionSize) ||
		h.Length > uint64(p.regionSize)-h.Offset {
		return 0, 0, 0, -1, fmt.Errorf("%w: %v", ErrForeignHandle, h)
	}
	r, off = int(h.Region), uintptr(h.Offset)
	gen, slot = p.c.grant(p.grantAt(r, off))
	lastGen, lastSlot := p.c.grant(p.grantAt(r, off+uintptr(h.Length)-1))
	if slot < 0 || uint32(gen) != h.Gen || lastGen != gen || lastSlot != slot {
		return 0, 0, 0, -1, fmt.Errorf("%w: %v", ErrStaleHandle, h)
	}
	return r, off, gen, slot, nil
}

// Bytes returns the buffer of a handle, mapped in this process. It fails with
// ErrForeignHandle for a handle of another pool, ErrStaleHandle for one whose memory changed
// owner since it was made. The slice is valid while its owner keeps the buffer live.
func (p *Process) Bytes(h Handle) ([]byte, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	r, off, _, _, err := p.check(h)
	if err != nil {
		return nil, err
	}
	return mem.Bytes(p.maps[r]+off, uintptr(h.Length)), nil
}

// FreeHandle frees the buffer of a handle, as Free does; it refuses a stale or foreign handle.
func (p *Process) FreeHandle(h Handle) error {
	if p.closed.Load() {
		return ErrClosed
	}
	r, off, gen, slot, err := p.check(h)
	if err != nil {
		return err
	}
	return p.free(r, off, gen, slot)
}

// drainer takes in the frees other processes made of this process's blocks, every interval.
func (p *Process) drainer(every time.Duration) {
	defer close(p.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.passFence()
			p.drain()
		}
	}
}

// passFence passes a fence the owner published (Owner.reclaim): it synchronizes the
// process's CUDA context, so that no copy it queued into memory the owner took back is still
// to run, and says so in its fence word. A synchronize that fails reports the context's
// sticky error: nothing of it runs any more either. A process without a Device has no
// registered mapping of the pool, and its copies from or to pageable memory are done when
// their calls return.
func (p *Process) passFence() {
	e := p.c.load(hFence)
	if e == p.fence {
		return
	}
	if p.dev != nil {
		_ = p.dev.Synchronize()
	}
	p.c.store(p.c.fenceWord(p.slot), e)
	p.fence = e
}

// drain takes in every pending remote free and returns how many it found. It frees them as
// the heap's owner, under the heap's lock: that also orders, for the race detector, the
// allocation of each block before its free, an order that reached here through another
// process and shared memory, which the detector cannot see.
func (p *Process) drain() int {
	n := 0
	for q := 0; q < p.slots; q++ {
		if q == p.slot || !p.c.pending(q, p.slot) {
			continue
		}
		p.mu.Lock()
		n += p.c.drain(q, p.slot, p.takeFree)
		p.mu.Unlock()
	}
	return n
}

// takeFree frees the block of a ring entry, unless the entry is stale.
func (p *Process) takeFree(e uint64) {
	poolOff, egen := unpackEntry(e)
	if poolOff >= p.poolBytes() {
		p.freeErrs.Add(1)
		return
	}
	r, off := int(poolOff/p.regionSize), poolOff%p.regionSize
	gen, slot := p.c.grant(p.grantAt(r, off))
	if slot != p.slot || gen&entryGenMask != egen {
		p.dropped.Add(1)
		return
	}
	if err := p.h.Free(p.maps[r] + off); err != nil {
		p.freeErrs.Add(1)
		return
	}
	p.freesIn.Add(1)
}

// Collect takes in now the frees other processes made of this process's buffers (the drainer
// does every drain interval) and hands the freed blocks to the heap.
func (p *Process) Collect() {
	if p.closed.Load() {
		return
	}
	p.drain()
	p.mu.Lock()
	p.h.Collect()
	p.mu.Unlock()
}

// Stats describes a process's side of the pool.
type Stats struct {
	// Slot is the process's number in the pool.
	Slot int
	// Heap is the process's heap: its live buffers, bytes, operations.
	Heap heap.Stats
	// Grants is the pool memory this process holds, in bytes.
	Grants uint64
	// RemoteFreesOut counts frees this process sent to other processes' rings; RemoteFreesIn
	// the frees of its buffers it took in from others.
	RemoteFreesOut, RemoteFreesIn uint64
	// RemoteFreesDropped counts frees taken in for memory no longer this process's (a free
	// that raced its grant being given back): harmless, ignored.
	RemoteFreesDropped uint64
	// RemoteFreeErrors counts frees taken in that were not of a live buffer (a double free or
	// an interior pointer by another process): refused, as a local one would be.
	RemoteFreeErrors uint64
	// Registered counts the regions registered with this process's CUDA context.
	Registered int
	// PageableRegions lists, one line each, the refusals (of mlock, of a CUDA registration)
	// that left a region of this process pageable or unregistered, with FallbackPageable
	// set: empty when every region is locked (and registered, with a device).
	PageableRegions []string
}

// Stats returns the process's figures.
func (p *Process) Stats() Stats {
	s := Stats{Slot: p.slot, RemoteFreesOut: p.freesOut.Load(), RemoteFreesIn: p.freesIn.Load(),
		RemoteFreesDropped: p.dropped.Load(), RemoteFreeErrors: p.freeErrs.Load()}
	if p.closed.Load() {
		return s
	}
	p.mu.Lock()
	s.Heap = p.h.Stats()
	s.PageableRegions = append([]string(nil), p.fallbacks...)
	for _, r := range p.registered {
		if r {
			s.Registered++
		}
	}
	p.mu.Unlock()
	for g := 0; g < p.grants(); g++ {
		if _, slot := p.c.grant(g); slot == p.slot {
			s.Grants += uint64(p.grantSize)
		}
	}
	return s
}

// shutdown leaves the pool: it waits for the work queued in the process's CUDA context (a
// copy into a buffer of the pool, its own or a peer's, may still be queued), stops the
// drainer, gives the heap and its grants back when no buffer is live (otherwise leave takes
// the grants back with the buffers: their handles go stale), leaves, and unmaps everything.
func (p *Process) shutdown() error {
	if !p.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	var first error
	if p.dev != nil {
		// The grants may go to another process as soon as they are back: every stream of this
		// context must have passed them first. (A synchronize that fails reports the context's
		// sticky error: nothing of it runs any more.)
		if err := p.dev.Synchronize(); err != nil {
			first = fmt.Errorf("shared: synchronizing before leaving: %w", err)
		}
	}
	close(p.stop)
	<-p.done
	p.drain()
	p.mu.Lock()
	if err := p.h.Close(); err == nil {
		if err := p.ar.Close(); err != nil && !errors.Is(err, arena.ErrClosed) {
			first = err
		}
	}
	p.mu.Unlock()
	if err := p.leave(); err != nil && first == nil {
		first = err
	}
	if err := p.unregisterAll(); err != nil && first == nil {
		first = err
	}
	p.unmapAll()
	if p.ownerFd >= 0 {
		unix.Close(p.ownerFd)
		p.ownerFd = -1
	}
	return first
}
