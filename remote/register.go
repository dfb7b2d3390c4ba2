package remote

import (
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/ucx"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Registration: a pool (or device heap) bound to a worker. It observes the pool's arena
// (arena.RegionObserver): each region is registered with ucp_mem_map when the arena maps it,
// its remote key packed then, once, and it is deregistered before the arena gives it back.
// So a buffer needs no registration of its own, ever: Describe finds its region. A region
// the arena reserved but has not committed (address space) is registered with
// UCP_MEM_MAP_NONBLOCK, which pins nothing up front (on-demand paging on NICs that have it;
// nothing to pin for TCP and shared memory).
//
// The worker keeps every registered region of every registration in one table sorted by
// base, published atomically, so that a transfer finds its local buffer's registration with
// no lock.

// localRegion is a region registered with the worker.
type localRegion struct {
	reg        *Registration
	id         uint32
	base, size uintptr
	mem        ucx.Mem
	rkey       string   // packed, shared by every descriptor of the region
	seg        *segment // the SegmentSource's allocation behind it, which owns mem; or nil
	inflight   int      // transfer operations on it in flight, under w.mu
	held       int      // requests UCX holds that name its registration (slot.held), under w.mu
}

// Registration is a pool or device heap registered with a Worker: every region of it is
// registered with UCX while mapped, so any of its buffers can be described (Describe) and
// moved. Close ends it; the pool or heap stays usable.
type Registration struct {
	w       *Worker
	pool    *pinned.Pool
	heap    *device.Heap
	memType int
	regions map[uintptr]*localRegion // by base, under w.mu
	closed  bool                     // under w.mu
	refused error                    // the last registration UCX refused, under w.mu
}

// Register registers pool p with the worker: its regions now, and each region it maps later,
// until Close (or the worker's Close, or the pool's). A pool may be registered with several
// workers.
func (w *Worker) Register(p *pinned.Pool) (*Registration, error) {
	r := &Registration{w: w, pool: p, memType: ucx.MemoryHost, regions: map[uintptr]*localRegion{}}
	return r, w.observe(r, func() error { return p.ObserveRegions(r) })
}

// RegisterDevice registers device heap h with the worker, with the CUDA memory type: UCX then
// moves its memory with its CUDA transports (cuda_copy, cuda_ipc, and GPUDirect RDMA on a NIC
// that has it). A UCX built without CUDA support refuses with ErrNotSupported.
func (w *Worker) RegisterDevice(h *device.Heap) (*Registration, error) {
	if !w.CUDA() {
		return nil, fmt.Errorf("%w: this UCX has no CUDA memory support (no cuda_copy transport: ucx_info -d lists none; Debian's libucx0 is built without CUDA)", ErrNotSupported)
	}
	if h == nil {
		return nil, fmt.Errorf("%w: a nil heap", ErrNotRegistered)
	}
	r := &Registration{w: w, heap: h, memType: ucx.MemoryCUDA, regions: map[uintptr]*localRegion{}}
	return r, w.observe(r, func() error { return h.Arena().Observe(r) })
}

func (w *Worker) observe(r *Registration, observe func() error) error {
	w.mu.Lock()
	if w.closing {
		w.mu.Unlock()
		return ErrClosed
	}
	w.regs[r] = true
	w.mu.Unlock()
	if err := observe(); err != nil {
		w.mu.Lock()
		delete(w.regs, r)
		w.mu.Unlock()
		if errors.Is(err, pinned.ErrClosed) || errors.Is(err, arena.ErrClosed) {
			return fmt.Errorf("%w: the pool is closed: %w", ErrClosed, err)
		}
		return err
	}
	return nil
}

// Mapped registers region g (arena.RegionObserver): called by the arena, with its lock held.
func (r *Registration) Mapped(g *arena.Region) error {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.closed || w.closing {
		return nil // a Close under way: the region is not registered, and the pool grows anyway
	}
	seg := w.segmentOf(g)
	var m ucx.Mem
	var err error
	if seg != nil {
		m = seg.mem // UCX allocated it: registered already
	} else if m, err = w.ctx.MemMap(g.Base, g.Size, r.memType, !g.Committed); err != nil {
		r.refused = err
		return fmt.Errorf("%w: region [%#x, +%d): %w", ErrNotRegistered, g.Base, g.Size, err)
	}
	key, err := w.ctx.PackRkey(m)
	if err != nil {
		if seg == nil {
			_ = w.ctx.MemUnmap(m)
		}
		return fmt.Errorf("%w: region [%#x, +%d): %w", ErrNotRegistered, g.Base, g.Size, err)
	}
	w.nextReg++
	lr := &localRegion{reg: r, id: w.nextReg, base: g.Base, size: g.Size, mem: m, rkey: string(key), seg: seg}
	r.regions[g.Base] = lr
	w.byID[lr.id] = lr
	next := append(slices.Clone(*w.regions.Load()), lr)
	sort.Slice(next, func(i, j int) bool { return next[i].base < next[j].base })
	w.regions.Store(&next)
	w.stats.registrations.Add(1)
	w.logf("remote: registered region %d [%#x, +%d)", lr.id, g.Base, g.Size)
	return nil
}

// Unmapping deregisters region g (arena.RegionObserver): called by the arena, with its lock
// held, when no buffer of g is live, so no transfer of this worker uses it.
func (r *Registration) Unmapping(g *arena.Region) {
	w := r.w
	w.mu.Lock()
	defer w.mu.Unlock()
	lr := r.regions[g.Base]
	if lr == nil {
		return
	}
	delete(r.regions, g.Base)
	delete(w.byID, lr.id)
	next := slices.DeleteFunc(slices.Clone(*w.regions.Load()), func(x *localRegion) bool { return x == lr })
	w.regions.Store(&next)
	switch {
	case w.closed:
	case lr.seg != nil: // the source frees it (segmentSource.Release), after the worker if UCX may hold requests naming it
		lr.seg.held = lr.seg.held || lr.held > 0 || w.abandoned
	case lr.held > 0 || w.abandoned:
		// UCX may still hold requests naming the registration: ours (lr.held), or, once a
		// peer died without UCX's failure handling, its own rendezvous replies to that peer,
		// which outlive ours. It deregisters their memory when it purges them, at the worker's
		// Close, which unmaps this registration after (TestPeerKilled/shm: a purge after the
		// unmap crashed UCX 1.13).
		w.leaked = append(w.leaked, lr.mem)
	default:
		_ = w.ctx.MemUnmap(lr.mem)
	}
	if !w.closing {
		w.forgotten(lr.id) // the peers that learned it forget it (forget.go)
	}
	w.logf("remote: deregistered region %d [%#x, +%d)", lr.id, lr.base, lr.size)
}

// lookup returns the registered region holding [addr, addr+n), or nil. No lock.
func (w *Worker) lookup(addr, n uintptr) *localRegion {
	regs := *w.regions.Load()
	i := sort.Search(len(regs), func(i int) bool { return regs[i].base+regs[i].size > addr })
	if i < len(regs) && addr >= regs[i].base && n <= regs[i].base+regs[i].size-addr {
		return regs[i]
	}
	return nil
}

// Describe returns the descriptor of buffer b, a live buffer of the registered pool (or a part
// of one), for a peer's Put and Get. It registers nothing: b's region was registered when it
// was mapped. Errors: ErrNotRegistered for memory of no region of this registration,
// pinned's for a slice that is not in a live buffer, ErrClosed after Close.
func (r *Registration) Describe(b []byte) (Descriptor, error) {
	if r.pool == nil {
		return Descriptor{}, fmt.Errorf("%w: a device heap's registration describes with DescribeDevice", ErrNotRegistered)
	}
	if len(b) == 0 {
		return Descriptor{}, fmt.Errorf("%w: empty buffer", ErrOutOfRange)
	}
	h, err := r.pool.Hold(b) // b lies in a live buffer
	if err != nil {
		return Descriptor{}, fmt.Errorf("%w: %w", ErrNotRegistered, err)
	}
	d, err := r.describe(mem.Addr(b), uintptr(len(b)))
	return d, errors.Join(err, h.Release())
}

// DescribeDevice returns the descriptor of n bytes of device memory at p, of the registered
// device heap.
func (r *Registration) DescribeDevice(p cuda.DevicePtr, n int) (Descriptor, error) {
	if r.heap == nil || n <= 0 {
		return Descriptor{}, fmt.Errorf("%w: %d bytes of device memory at %#x", ErrNotRegistered, n, p)
	}
	return r.describe(uintptr(p), uintptr(n))
}

func (r *Registration) describe(addr, n uintptr) (Descriptor, error) {
	w := r.w
	lr := w.lookup(addr, n)
	if lr == nil || lr.reg != r {
		w.mu.Lock()
		closed := r.closed
		w.mu.Unlock()
		if closed {
			return Descriptor{}, fmt.Errorf("%w: the registration was closed", ErrClosed)
		}
		return Descriptor{}, fmt.Errorf("%w: [%#x, +%d) lies in no region of this registration", ErrNotRegistered, addr, n)
	}
	return Descriptor{worker: w.id, region: lr.id, memType: uint8(r.memType), base: uint64(lr.base), size: uint64(lr.size),
		addr: uint64(addr), n: uint64(n), rkey: lr.rkey}, nil
}

// Regions returns the number of regions registered now.
func (r *Registration) Regions() int {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return len(r.regions)
}

// Close deregisters every region and stops observing the pool (which stays usable). It
// refuses with ErrBusy while a transfer of this worker uses one of its buffers. A peer's put by
// message that has not landed when it returns is refused (ErrDescriptor at the peer), as is a
// get by message not yet posted for sending.
func (r *Registration) Close() error { return r.close(false) }

func (r *Registration) close(force bool) error {
	w := r.w
	w.mu.Lock()
	if r.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if !force {
		for _, lr := range r.regions {
			if lr.inflight > 0 {
				w.mu.Unlock()
				return fmt.Errorf("%w: %d operations on region %d", ErrBusy, lr.inflight, lr.id)
			}
		}
		// A transfer waiting in the queue for slots: its operations not yet posted name their
		// region's registration when they are (op.Mem), which the close would unmap first.
		for _, t := range w.queue {
			for _, lr := range t.lrs[min(t.posted, len(t.lrs)):] {
				if lr.reg == r {
					w.mu.Unlock()
					return fmt.Errorf("%w: a transfer waiting for slots uses region %d", ErrBusy, lr.id)
				}
			}
		}
	}
	r.closed = true
	delete(w.regs, r)
	w.mu.Unlock()
	// Out of the worker's lock: the arena calls Unmapping with its own held.
	if r.pool != nil {
		r.pool.UnobserveRegions(r)
	} else {
		r.heap.Arena().Unobserve(r)
	}
	return nil
}
