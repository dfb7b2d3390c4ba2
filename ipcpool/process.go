package ipcpool

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Process is one process's side of a pool: the owner's (Owner embeds it) or an attached
// process's (Attach). It is a pinned.Pool — Alloc, Free from any goroutine, FreeAsync and
// RecordStream, Stats and Usage, the metrics and the debug page all work on it as on any
// pool — whose memory is grants of the pool shared by the host's processes, plus what
// crosses processes: Handle, Bytes, FreeHandle, Retain and Release, and the pool-wide
// figures (SharedStats). A Free of a peer's buffer (mapped with Bytes) goes to its holder. Its
// methods are safe for use from several goroutines.
type Process struct {
	*pinned.Pool
	layout
	id     uint64 // the pool's identity
	slot   int
	serial uint64
	c      ctl
	sp     *space
	src    *source
	dev    *cuda.Device // opened for a CUDAHost process, closed at the end
	ex     exportState
	owner  *Owner  // the owner's own process: its drainer ticks the owner too
	cl     *client // an attached process's connection to the owner

	pushMu  sync.Mutex // the producer side of this process's rings
	drainMu sync.Mutex // the consumer side: drain (the drainer, Collect)
	every   time.Duration
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	leaveMu sync.Mutex   // the leave, and a later Close's retry of what the driver refused
	left    bool         // the leave is done (leaveMu)
	users   atomic.Int64 // calls under way that read the mapping (enter): Close waits for them
	// What the drainer last saw: the fence epoch it passed, the owner's ask it answered, the
	// overflow count it scanned for.
	fence, asked, overflow uint64
	retainedEver           bool // sFlags has flagRetains (ex.mu)
	// pause, set by tests only, runs as a call resolves a handle: a call paused under way.
	pause func()
	// pauseFree, set by tests only, runs as a FreeHandle or a Release has let its reference
	// go and has not retired the entry yet (a process killed there: killedmid_test.go).
	pauseFree func()
	// pauseTake, set by tests only (under ex.mu), runs as a take-in (takeRetired, takeGone's
	// scan) gives a buffer back to the pool: before its FreeShared (freed false) and after.
	pauseTake func(freed bool)
	// waiting, set by tests only (under ex.mu), runs as a call finds a buffer being taken in
	// and waits for it (under ex.mu).
	waiting func()

	st counters
}

// counters are a process's own figures.
type counters struct {
	shared, freedHandles           atomic.Uint64
	retiredIn, retiredOut, dropped atomic.Uint64
	overflows, scans, freeErrors   atomic.Uint64
	trims                          atomic.Uint64
}

// processConfig is what newProcess needs beside the hello and the mapping.
type processConfig struct {
	pool  pinned.Options
	drain time.Duration
	dev   *cuda.Device
}

// newProcessFails, set by tests only, is asked as newProcess begins, with its hello: an error
// it returns is newProcess's, as a pinned.New that refuses (an adoption that fails there).
var newProcessFails func(h hello) error

// newProcess builds a process's pool over the mapped pool sp (start starts its drainer). On
// error it closes what it made but not sp.
func newProcess(h hello, sp *space, g granter, cfg processConfig) (*Process, error) {
	if newProcessFails != nil {
		if err := newProcessFails(h); err != nil {
			return nil, err
		}
	}
	p := &Process{layout: h.layout, id: h.pool, slot: h.slot, serial: h.serial, c: sp.ctl(), sp: sp, dev: cfg.dev,
		ex: newExportState(h.exports), every: cfg.drain, stop: make(chan struct{}), done: make(chan struct{})}
	if p.every <= 0 {
		p.every = DefaultDrainInterval
	}
	// With a device the pool's memory is the driver's to copy asynchronously (registered, or
	// VMM granules): the pool orders frees by stream. A region whose registration was refused
	// (FallbackPageable) is copied synchronously, and ordering its frees costs nothing more.
	p.src = newSource(h.layout, sp.base, g, sp.dev)
	o := cfg.pool
	o.Source, o.Sharer = p.src, sharer{p}
	o.Backend = pinned.Locked
	if sp.dev != nil {
		o.Backend, o.Device = pinned.CUDAHost, sp.dev.Ordinal()
	}
	var err error
	if p.Pool, err = pinned.New(o); err != nil {
		return nil, err
	}
	var flags uint64
	if cfg.dev != nil {
		flags |= flagDevice
	}
	p.c.slotStore(p.slot, sFlags, flags)
	p.fence = p.c.load(hFence)
	p.c.slotStore(p.slot, sFence, p.fence) // nothing of this process can use memory fenced before it came
	p.asked = p.c.slotLoad(p.slot, sAsk)
	p.overflow = p.c.slotLoad(p.slot, sOverflow)
	return p, nil
}

// start starts the drainer, once the process is whole.
func (p *Process) start() { go p.drainer() }

// Slot returns the process's number in the pool (the owner's is 0).
func (p *Process) Slot() int { return p.slot }

// ID returns the pool's identity: the Pool of its handles. An owner that adopts the pool
// (Options.Adopt) serves the same identity.
func (p *Process) ID() uint64 { return p.id }

// SharedStats describes a process's side of the pool and, in Pool, the pool as every process
// sees it. (The process's pool has pinned's Stats and Usage, as any pool.)
type SharedStats struct {
	// Slot is the process's number in the pool.
	Slot int
	// GrantBytes is the pool memory this process holds: the grants it was lent, in bytes.
	GrantBytes int
	// Shared counts the buffers this process shared (Handle); Exported is how many are
	// shared now.
	Shared   uint64
	Exported int
	// Retained is how many peers' buffers this process retains now.
	Retained int
	// FreedHandles counts the allocations this process let go by handle (FreeHandle, a Free
	// of a peer's buffer).
	FreedHandles uint64
	// RetiredIn counts this process's buffers that went back to its pool when their last
	// reference went; RetiredOut those of peers whose last reference this process let go.
	RetiredIn, RetiredOut uint64
	// Dropped counts ring entries that named no retirement of this process's: a forged or garbled
	// entry, refused (a duplicate of a delivery taken already is not counted). Overflows counts
	// retirements this process could not put on a full ring (the holder scanned for them), Scans
	// the looks through its own shared buffers for retired ones (on an overflow, and every 100 ms).
	Dropped, Overflows, Scans uint64
	// FreeErrors counts buffers this process's pool refused to free when their last reference
	// went (it should stay zero).
	FreeErrors uint64
	// Trims counts the times this process gave its empty grants back when the owner asked.
	Trims uint64
	// RefusedDonations, in the owner's, counts the donations of a pool's memory it refused
	// as it waited to adopt one (Options.Adopt): garbage, descriptors that are not a pool's,
	// or a pool its own process could not be built over. Each donor was cut off, and the
	// owner waited for another.
	RefusedDonations uint64
	// Registered counts the regions registered with this process's CUDA context.
	Registered int
	// PageableRegions lists the refusals (of mlock, of a CUDA registration) that left
	// regions of this process pageable or unregistered, with FallbackPageable set: empty
	// when every region is locked (and registered, with a device).
	PageableRegions []string
	// Pool is the pool as the control region tells it.
	Pool PoolStats
}

// PoolStats is the pool as every process sees it in the control region.
type PoolStats struct {
	// Size is the pool's memory; GrantSize its unit.
	Size, GrantSize int
	// Processes is how many processes are attached, the owner included.
	Processes int
	// Held, Free, Fenced, Limbo and Orphaned count grants: held by a process; free; free
	// once every process with a device passed the fence; of a process gone from its socket
	// but not yet exited; kept for buffers others retain of a process gone.
	Held, Free, Fenced, Limbo, Orphaned int
	// Exported is how many buffers are shared across the pool now.
	Exported int
	// RingDepth is the handles waiting on rings for their holders.
	RingDepth int
}

// SharedStats returns the process's figures of what crosses processes, and the pool's.
func (p *Process) SharedStats() SharedStats {
	s := SharedStats{Slot: p.slot, Shared: p.st.shared.Load(), FreedHandles: p.st.freedHandles.Load(),
		RetiredIn: p.st.retiredIn.Load(), RetiredOut: p.st.retiredOut.Load(), Dropped: p.st.dropped.Load(),
		Overflows: p.st.overflows.Load(), Scans: p.st.scans.Load(), FreeErrors: p.st.freeErrors.Load(), Trims: p.st.trims.Load()}
	if p.owner != nil {
		s.RefusedDonations = p.owner.refusedDonations.Load()
	}
	if !p.enter() {
		return s
	}
	defer p.exit()
	s.GrantBytes = p.src.grantsHeld() * int(p.grantSize)
	p.ex.mu.Lock()
	s.Exported, s.Retained = len(p.ex.byAddr), len(p.ex.retains)
	p.ex.mu.Unlock()
	for _, r := range p.sp.registered {
		if r {
			s.Registered++
		}
	}
	s.PageableRegions = append([]string(nil), p.sp.pageable...)
	s.Pool = p.poolStats()
	return s
}

// poolStats reads the pool's figures from the control region.
func (p *Process) poolStats() PoolStats {
	c := &p.c
	ps := PoolStats{Size: int(p.poolBytes()), GrantSize: int(p.grantSize)}
	for g := range p.grants() {
		_, state, slot := unpackGrant(c.load(c.grantWord(g)))
		switch {
		case state == gFenced:
			ps.Fenced++
		case state == gLimbo:
			ps.Limbo++
		case state == gOrphan:
			ps.Orphaned++
		case slot >= 0:
			ps.Held++
		default:
			ps.Free++
		}
	}
	for s := range p.slots {
		if v := c.slotLoad(s, sSerial); v != 0 && v&serialGone == 0 {
			ps.Processes++
		}
		for q := range p.slots {
			r := c.ring(q, s)
			if d := c.load(r+lineWords) - c.load(r); d <= uint64(p.ringCap) {
				ps.RingDepth += int(d)
			}
		}
	}
	for e := range p.slots * p.exports {
		if c.load(c.entry(e)+eState)&eLive != 0 {
			ps.Exported++
		}
	}
	return ps
}

// enter starts a call that reads the pool's mapping (the control region, the pool's range),
// or reports false once the process is closed; exit ends it. Close unmaps nothing while a call
// is under way.
func (p *Process) enter() bool {
	p.users.Add(1)
	if p.closed.Load() {
		p.users.Add(-1)
		return false
	}
	return true
}

func (p *Process) exit() { p.users.Add(-1) }

// waitUsers waits, once closed is set, for the calls under way to end (they are short: none
// waits on a peer).
func (p *Process) waitUsers() {
	for p.users.Load() != 0 {
		time.Sleep(20 * time.Microsecond)
	}
}

// stopDrainer stops the drainer and waits for it.
func (p *Process) stopDrainer() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

// letGoAll releases every retain this process holds and forgets the peers' buffers it mapped,
// as it leaves.
func (p *Process) letGoAll() {
	p.ex.mu.Lock()
	var retired []Handle
	for h := range p.ex.retains {
		p.ex.retains[h] = 1
		if ok, _ := p.release(h); ok {
			retired = append(retired, h)
		}
	}
	clear(p.ex.peers)
	p.ex.mu.Unlock()
	for _, h := range retired {
		p.deliver(int(h.Entry), h.Gen)
	}
}

// closePool closes the process's pool. With live buffers it reports ErrLiveBlocks (from
// pinned) and, with force, closes it anyway: no more Alloc, the live buffers given up.
func (p *Process) closePool(force bool) error {
	err := p.Pool.Close()
	if err == nil || errors.Is(err, pinned.ErrClosed) {
		return nil
	}
	if errors.Is(err, pinned.ErrLiveBlocks) && !force {
		return fmt.Errorf("%w: %w", ErrAttached, err)
	}
	return err
}

// captureRefusal is the refusal of a Close while a stream of the process's CUDA context
// captures a CUDA graph: the driver refuses the synchronize of the context that the leave waits
// with (in every capture mode), so work queued into the pool's memory may still be to run, and
// the process must not give its grants back or unmap the pool under it. It synchronizes the
// context, and returns an error matching cuda.ErrCapturing when the driver refuses for a
// capture; nil otherwise (any other failure is the leave's to report), or when the process has
// no device or has left already.
func (p *Process) captureRefusal() error {
	if p.dev == nil || p.closed.Load() {
		return nil
	}
	if err := p.dev.Synchronize(); errors.Is(err, cuda.ErrCapturing) {
		return fmt.Errorf("ipcpool: not leaving while work may be queued in the process's CUDA "+
			"context, which a capture keeps from being waited for; Close again after it: %w", err)
	}
	return nil
}

// leaveAll is Close's work for any process: it waits for the work queued in its CUDA context (a
// copy into a buffer of the pool may still be queued), stops the drainer, lets go its retains,
// takes in what peers let go, closes its pool (its grants go back as its arena gives its regions
// back), unmaps the pool (leaving junk memory where buffers were still live, so that a late use
// faults nowhere and touches nothing of the pool), closes the device, and then, detach not nil,
// tells the owner. It reports the live buffers it gave up (pinned.ErrLiveBlocks). Memory the driver
// refuses to give back is kept, with the device, for the next Close (leaveAgain): the process has
// left all the same, its grants given back, but for a VMM mapping the driver keeps: that range
// is still the pool's memory, mapped and writable here, so the grants are not given back and
// detach is told to keep them (kept): the owner lends them to no other process until this one
// exits. The grants its pool gives back as it closes are held back until the unmap says which.
func (p *Process) leaveAll(detach func(kept bool) error) error {
	if !p.closed.CompareAndSwap(false, true) {
		return p.leaveAgain()
	}
	if p.cl != nil {
		p.cl.holdReleases()
	}
	p.waitUsers()
	var errs []error
	if p.dev != nil {
		if err := p.dev.Synchronize(); err != nil {
			errs = append(errs, fmt.Errorf("%w: synchronizing before leaving: %w", ErrRefused, err))
		}
	}
	p.stopDrainer()
	p.letGoAll()
	p.drain()
	live := p.closePool(true)
	if live != nil {
		errs = append(errs, live)
	}
	// leaveMu is held only here, not while the calls under way end (one may Close again).
	p.leaveMu.Lock()
	if err := p.sp.close(live != nil); err != nil {
		errs = append(errs, err)
	}
	p.left = true
	// The pool's memory, still reachable here: a VMM mapping (keepRegions), or a range close
	// could not make unreachable.
	kept := p.sp.vmm != nil || p.sp.exposed
	if !p.sp.held() {
		closeDevice(p.dev)
	}
	p.leaveMu.Unlock()
	if p.cl != nil && !kept {
		p.cl.sendHeld()
	}
	if detach != nil {
		if err := detach(kept); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// leaveAgain is a Close after the process left: it gives back what the driver refused to at
// the leave (registrations, the VMM mapping), then unmaps the pool and closes the device. It
// returns ErrClosed when nothing was kept.
func (p *Process) leaveAgain() error {
	p.leaveMu.Lock()
	defer p.leaveMu.Unlock()
	if !p.left || !p.sp.held() { // not left yet (another Close leaves), or nothing kept
		return ErrClosed
	}
	err := p.sp.close(false)
	if !p.sp.held() {
		closeDevice(p.dev)
	}
	return err
}
