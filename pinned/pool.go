// The Pool: New, Alloc, Free and their fast paths (the package documentation is in doc.go).

package pinned

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/fence"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/procpin"
)

const (
	// MinCapacity is the smallest capacity New accepts: one 2 MiB chunk.
	MinCapacity = 2 << 20
	// MaxCapacity is the largest capacity New accepts: 128 TiB, the user address space of an
	// x86-64 or arm64 process with 48-bit virtual addresses. Capacity is address space only;
	// the pool's bookkeeping grows with the memory it uses, not with its capacity.
	MaxCapacity = heap.MaxCapacity
	// MaxShards is the most home shards (heaps) a pool keeps: Options.Shards above it is
	// refused. Spill shards (see Options.Shards) add at most as many again.
	MaxShards = 1 << 12
)

// Pool hands out pinned []byte buffers. It is safe for concurrent use.
type Pool struct {
	a       *arena.Arena
	g       *heap.Group
	align   uintptr
	backend Backend
	host    *arena.HostProvider // nil for other providers

	fast   bool                     // fast sections run: fastPaths, and a home slot per P at New
	home   []homeSlot               // by P number (see shard.go); empty until first used
	spill  atomic.Pointer[[]*shard] // spill shards, at most len(home)
	shards atomic.Pointer[[]*shard] // every shard, in the order made: by heap.Heap.Index
	big    bigShard                 // where memory is coarse (bigshard.go)
	// fastMax is the largest request Alloc and Free serve in a fast section as they start:
	// 0 where they run none (no fast sections, or guards), the big shard's smallest less one
	// where it takes larger ones. One comparison, uint(n-1) < fastMax, tests all of that and
	// n > 0.
	fastMax uint
	bigFast bool // the big shard's fast paths run for unguarded requests of its sizes
	growMu  sync.Mutex

	pc    precommit // the background commit of Options.Precommit
	purge purger    // the idle purge (purge.go)

	order *streamOrder // stream-ordered reuse (stream.go); nil where copies are synchronous
	out   outside      // buffers held by work outside the pool (hold.go)
	busy  atomic.Bool  // Close found deferred buffers: a later Close waits for them again

	closed   atomic.Bool // no more Alloc
	released atomic.Bool // memory given back: no more Free either
	counted  counts      // the heaps' counters at the release, which Stats says after it
	refused  atomic.Bool // the driver refused to give some back at the release: Close and Trim try again
	closeMu  sync.Mutex

	// guarded is set when ZeroOnFree, a quota or RecordSites is on: Alloc and Free then take
	// their slow paths (guard.go); with all off they cost one test of this field.
	guarded    bool
	zeroOnFree bool
	quota      int64
	used       atomic.Int64          // live bytes, counted only under a quota
	sites      *siteTable            // allocation sites, with Options.RecordSites (sites.go)
	trace      *alloctrace.Writer    // Options.Trace (trace.go)
	traceG     bool                  // Options.TraceGoroutines
	traceLost  atomic.Uint64         // allocations the trace refused to record (trace.go)
	traceWhy   atomic.Pointer[error] // the first of those refusals
	log        *slog.Logger          // Options.Logger, or nil
	sharer     Sharer                // Options.Sharer, or nil (share.go)
}

// New creates a pool. The zero Options give locked host memory with 64-byte alignment and a
// capacity of the machine's physical memory (address space only: memory is committed, and
// locked, as buffers need it).
func New(o Options) (*Pool, error) {
	p, err := newPool(o)
	return p, wrapError(err, ErrInvalidOptions)
}

func newPool(o Options) (*Pool, error) {
	prov, host, err := o.provider()
	if err != nil {
		return nil, err
	}
	made := false
	defer func() {
		if !made {
			_ = closeDevice(prov)
		}
	}()
	capacity, err := o.capacity(prov)
	if err != nil {
		return nil, err
	}
	order, err := newStreamOrder(prov, o.Device)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !made && order != nil {
			_ = order.close()
		}
	}()
	if capacity < MinCapacity || capacity > MaxCapacity {
		what := "capacity"
		if o.Backend == External && o.Capacity == 0 {
			what = "the External region's size"
		}
		return nil, fmt.Errorf("%w: %s %d bytes (want %d bytes, one 2 MiB chunk, to %d, 128 TiB of address space)",
			ErrInvalidOptions, what, capacity, MinCapacity, uint64(MaxCapacity))
	}
	if uintptr(o.Precommit) > capacity {
		return nil, fmt.Errorf("%w: precommit %d bytes above the capacity %d", ErrInvalidOptions, o.Precommit, capacity)
	}
	a, err := arena.New(arena.Options{Provider: prov, Capacity: capacity, PurgeDelay: o.PurgeDelay, Align: uintptr(o.Align), Logger: o.Logger,
		CommitWorkers: o.CommitWorkers})
	if err != nil {
		return nil, err
	}
	g, err := heap.NewGroup(a)
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	if o.Quota < 0 {
		_ = a.Close()
		return nil, fmt.Errorf("%w: quota %d", ErrInvalidOptions, o.Quota)
	}
	p := &Pool{a: a, g: g, align: uintptr(o.Align), backend: o.Backend, host: host, order: order,
		guarded: o.ZeroOnFree || o.Quota > 0 || o.RecordSites || o.Trace != nil, zeroOnFree: o.ZeroOnFree, quota: int64(o.Quota), log: o.Logger, sharer: o.Sharer}
	p.purge.delay = purgeDelay(o.PurgeDelay, prov)
	p.purge.tick = p.purgeTick
	if o.RecordSites {
		p.sites = newSiteTable()
	}
	if o.Trace != nil {
		p.trace, p.traceG = alloctrace.NewWriter(o.Trace), o.TraceGoroutines
	}
	n := o.Shards
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	if n > MaxShards {
		_ = a.Close()
		return nil, fmt.Errorf("%w: %d shards (at most %d)", ErrInvalidOptions, n, MaxShards)
	}
	p.home = make([]homeSlot, n)
	p.fast = fastPaths() && n >= runtime.GOMAXPROCS(0)
	p.shards.Store(new([]*shard))
	p.spill.Store(new([]*shard))
	if g.Coarse() && n > 1 {
		p.big.min = g.OwnPageMin()
		p.big.home, p.big.fast, p.big.last = p.home, p.fast, -1
	}
	switch {
	case !p.fast || p.guarded:
	case p.big.min != 0:
		p.fastMax = uint(p.big.min - 1)
		p.bigFast = true
	default:
		p.fastMax = math.MaxInt
	}
	s, err := p.newShard(p.homeSlot(procpin.ID())) // validates the alignment now rather than at the first Alloc
	if err != nil {
		_ = a.Close()
		return nil, err
	}
	letGo(s)
	made = true
	if order != nil {
		order.start(g, p.freeDeferred, !p.zeroOnFree && p.quota == 0, p.enqueue, &p.out)
		own(p) // PoolOf finds it (owners.go)
	}
	p.startPrecommit(int64(o.Precommit), o.OnPrecommit)
	return p, nil
}

// Alloc returns a buffer of n bytes with len and cap n, aligned to the pool's alignment. Its
// contents are undefined. When the pool is full while buffers freed in stream order
// (FreeAsync, RecordStream) wait for their streams, Alloc waits for those streams (a
// synchronize of each) and takes them back before it fails with ErrOutOfMemory; where that
// wait fails, its error says why too (ErrDeviceFault after a fault, cuda.ErrCapturing for a
// stream a CUDA graph capture holds).
func (p *Pool) Alloc(n int) ([]byte, error) {
	// The fast path, written out here so that it costs one call: a fast section on the P's
	// shard (see shard.go) and the heap's non-blocking allocation. allocRest has the rest.
	if uint(n-1) < p.fastMax {
		if s, h := p.enteredHeap(procpin.Pin()); s == nil {
			procpin.Unpin()
		} else {
			var addr uintptr
			ok := false
			if !p.closed.Load() { // see allocOnce
				addr, ok = h.TryAlloc(uintptr(n))
			}
			p.exit(s)
			if ok {
				return mem.Bytes(addr, uintptr(n)), nil
			}
		}
		return p.allocRest(n, 0)
	}
	if p.bigFast && uint(n) >= uint(p.big.min) { // n < 0 too: TryAlloc refuses, alloc says why
		// The big shard's fast section, written out too (see bigshard.go).
		if s := p.big.s.Load(); s != nil {
			if hs := p.big.enter(s, procpin.Pin()); hs == nil {
				procpin.Unpin()
			} else {
				var addr uintptr
				ok := false
				if !p.closed.Load() {
					addr, ok = s.h.TryAlloc(uintptr(n))
				}
				fence.Release(&hs.bigInside, 0)
				procpin.Unpin()
				if ok {
					return mem.Bytes(addr, uintptr(n)), nil
				}
			}
		}
	}
	return p.alloc(n, 0, true)
}

// AllocAligned returns a buffer of n bytes whose address is a multiple of alignment, any power
// of two (beyond 2 MiB too). It is freed with Free like any other buffer.
func (p *Pool) AllocAligned(n, alignment int) ([]byte, error) {
	if alignment <= 0 || alignment&(alignment-1) != 0 {
		return nil, fmt.Errorf("%w: %d", ErrInvalidAlign, alignment)
	}
	return p.alloc(n, uintptr(alignment), true)
}

// alloc is Alloc where its fast path did not run, and AllocAligned; guard false skips the
// guards (ZeroOnFree, a quota, sites, a trace), for the guarded path's own allocation, which
// takes the fast path here (written out again: a helper would be a call more on Alloc's).
func (p *Pool) alloc(n int, alignment uintptr, guard bool) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalidSize, n)
	}
	if guard && p.guarded {
		return p.allocGuarded(n, alignment)
	}
	if alignment == 0 && p.fast {
		if p.big.owns(uintptr(n)) {
			if addr, ok := p.tryAllocBig(uintptr(n)); ok {
				return mem.Bytes(addr, uintptr(n)), nil
			}
		}
		if s, h := p.enteredHeap(procpin.Pin()); s == nil { // as Alloc's fast path
			procpin.Unpin()
		} else {
			var addr uintptr
			ok := false
			if !p.closed.Load() {
				addr, ok = h.TryAlloc(uintptr(n))
			}
			p.exit(s)
			if ok {
				return mem.Bytes(addr, uintptr(n)), nil
			}
		}
	}
	return p.allocRest(n, alignment)
}

// allocRest is an allocation of n > 0 bytes where no fast section served: as a shard's holder,
// and once more after taking back what other shards and the streams hold.
func (p *Pool) allocRest(n int, alignment uintptr) ([]byte, error) {
	// A size or an alignment beyond the capacity, which no memory the pool could take back
	// would serve, the heap refuses with heap.ErrTooLarge before any arena call: not out of
	// memory, so it is said at once, with no retry and no wait for a stream.
	addr, err := p.allocOnce(uintptr(n), alignment)
	for try := 0; err != nil && try < allocRetries && outOfMemory(err); try++ {
		// Other shards may hold freed blocks they have not collected, and streams may have
		// passed deferred ones: take them back, give the shards' free memory to the arena
		// (which gives it back at once when the memlock limit refuses the retry), retry.
		if try > 0 {
			runtime.Gosched() // let the goroutines that took the memory back free theirs
		}
		// Its error is dropped, and none is lost: the driver's (a stream or event it refuses,
		// a fault's sticky error, a capture that puts off the context's synchronize) leaves the
		// buffers it concerns deferred, so waitDeferred below says it again if this Alloc
		// fails, and so does the next Trim or Close otherwise; where the driver answers a
		// later call, the buffers come back and there is nothing left to say. A free of a
		// buffer the streams have passed fails only where the pool's own state is broken (a
		// deferred buffer is a held block checked at its free), which invariants builds check.
		_ = p.reclaim(true)
		p.collectAll()
		addr, err = p.allocOnce(uintptr(n), alignment)
	}
	if err != nil && outOfMemory(err) && p.order != nil && p.order.returning() {
		// Buffers freed in stream order still wait for their streams (a staging loop that
		// queues copies faster than the GPU runs them): wait for those streams, as a device
		// heap does, rather than fail with the memory about to come back.
		derr := p.waitDeferred() // what came back of the other streams serves even so
		if addr, err = p.allocOnce(uintptr(n), alignment); err != nil && derr != nil {
			return nil, errors.Join(p.allocError(err, uintptr(n), alignment), derr)
		}
	}
	if err != nil {
		return nil, p.allocError(err, uintptr(n), alignment)
	}
	return mem.Bytes(addr, uintptr(n)), nil
}

// allocOnce allocates from a shard it holds. It checks closed as the shard's owner: Close sets
// closed before it holds any shard to count the live buffers, so an Alloc either sees closed or
// ends before Close counts its shard.
func (p *Pool) allocOnce(n, alignment uintptr) (uintptr, error) {
	s := p.ownFor(n)
	defer letGo(s)
	if p.closed.Load() {
		return 0, ErrClosed
	}
	p.purgeSoon(s)
	if n := len(s.pend); n > 0 && n == cap(s.pend) {
		p.drainPend(s) // a full FreeAsync cache: back on the pages if its stream is idle
	}
	if p.reclaimSoon() {
		// Take back the deferred buffers the streams have passed: the shard's own go straight
		// back on their pages, which stay for this allocation (TryFreeHeld keeps empty ones).
		p.flush(s) // the cache too, under the same queries
		// Its error is said again, as allocRest's reclaims' (see there): none is lost.
		_ = p.order.reclaim(s.h, false)
	}
	if alignment == 0 {
		return s.h.Alloc(n)
	}
	return s.h.AllocAligned(n, alignment)
}

// allocError gives an allocation's error this package's sentinel: one its source gave for a
// reason other than a want of memory, and that names none of the layers below, is ErrRefused.
// A request beyond the capacity (heap.ErrTooLarge) is said in the pool's words, once; so is one
// within it that an External region, fixed in place, cannot hold at its alignment.
func (p *Pool) allocError(err error, n, alignment uintptr) error {
	if errors.Is(err, heap.ErrTooLarge) {
		c := p.a.Capacity()
		asked, there := fmt.Sprintf("%d bytes", n), ""
		if alignment != 0 {
			asked, there = fmt.Sprintf("%d bytes aligned to %d", n, alignment), " at that alignment"
		}
		if m := p.a.MaxSpan(alignment); n <= c && alignment <= c && n > m {
			// The heap aligns to its own alignment at least, which the arena's grid meets.
			err = fmt.Errorf("%s asked of a pool of capacity %d, whose external region holds at most %d bytes%s: %w",
				asked, c, m, there, heap.ErrTooLarge)
		} else {
			err = fmt.Errorf("%s asked of a pool of capacity %d: %w", asked, c, heap.ErrTooLarge)
		}
		return errkind.Wrap(ErrTooLarge, err, heap.ErrTooLarge)
	}
	if errors.Is(err, arena.ErrCapacity) {
		err = p.inPieces(err, n)
	}
	return wrapError(err, ErrRefused)
}

// inPieces gives err, the arena's refusal of a request of n bytes for want of capacity once
// every shard gave back what it kept, what the caller can do about it when the live buffers
// leave room for the request: the free capacity then lies in pieces among the chunks that live
// buffers keep, each shard in chunks of its own, and no run of free chunks is long enough. It
// holds every shard to count the live bytes (Usage), on the failure's path only.
func (p *Pool) inPieces(err error, n uintptr) error {
	if p.released.Load() {
		return err
	}
	u, c := p.Usage(), uint64(p.a.Capacity())
	if u.InUse > c || uint64(n) > c-u.InUse {
		return err // full: what is live leaves no room
	}
	do := "a larger Capacity leaves room"
	if k := len(*p.shards.Load()); k > 1 {
		do = fmt.Sprintf("each of the pool's %d shards keeps its own: a larger Capacity, or fewer Shards, leaves room", k)
	}
	return fmt.Errorf("%d bytes live of a capacity of %d, the rest in pieces among the %d MiB chunks that live buffers keep (%s): %w",
		u.InUse, c, p.a.ChunkSize()>>20, do, err)
}

// Free gives a buffer back. b must start where a slice returned by Alloc starts and have its
// capacity: the buffer itself, or the buffer resliced from its start (buf = buf[:nread]; the
// whole buffer is freed). Any other sub-slice (offset, or with its capacity cut), a double free
// or a slice of other memory is refused with an error and changes nothing. After Close, Free
// still takes back the buffers that were live, and the pool's memory is released with the last
// of them.
func (p *Pool) Free(b []byte) error {
	// The fast path, written out here so that it costs one call: a fast section on the P's
	// shard (see shard.go) and the heap's non-blocking free of a block no stream holds.
	if uint(cap(b)-1) < p.fastMax && !p.released.Load() {
		addr, n := mem.Addr(b), uintptr(cap(b))
		if s, h := p.enteredHeap(procpin.Pin()); s == nil {
			procpin.Unpin()
		} else {
			done, held := h.TryFreeOrHeld(addr, n)
			if done && !held {
				p.exit(s)
				if p.closed.Load() {
					p.finishClose(addr)
				}
				return nil
			}
			r := p.freeHeldIn(s, h, addr, n, done, held, true)
			if r.done && r.held && !p.closed.Load() { // deferred in the section (RecordStream, Free)
				p.order.verify()
				return nil
			}
			return p.freeRest(addr, n, true, r)
		}
		return p.freeRest(addr, n, true, fastFree{})
	}
	if p.bigFast && uint(cap(b)) >= uint(p.big.min) && !p.released.Load() {
		// The big shard's fast section, written out too (see bigshard.go).
		if s := p.big.s.Load(); s != nil {
			if hs := p.big.enter(s, procpin.Pin()); hs == nil {
				procpin.Unpin()
			} else {
				addr, n := mem.Addr(b), uintptr(cap(b))
				done, held := s.h.TryFreeOrHeld(addr, n)
				fence.Release(&hs.bigInside, 0)
				procpin.Unpin()
				if done { // never held as well
					if p.closed.Load() {
						p.finishClose(addr)
					}
					return nil
				}
				if held {
					return p.freeRest(addr, n, true, fastFree{held: true})
				}
			}
		}
	}
	return p.free(b, true)
}

// free is Free where its fast path did not run; guard false skips the guards, for the guarded
// path's own free (which runs under the site table's locks, so it leaves finishClose to Free),
// which takes the fast path here.
func (p *Pool) free(b []byte, guard bool) error {
	addr, n, err := p.buffer(b)
	if err != nil {
		return err
	}
	if guard && p.sharer != nil {
		// The Sharer first, as freeRest and FreeAsync ask it: a shared buffer's free drops
		// its reference at once, and the last one's give-back waits for the buffer's holds
		// (releaseShared).
		if done, err := p.sharedOrForeign(addr, n, fastFree{}, nil); done {
			return err
		}
	}
	if guard && p.guarded {
		err := p.freeGuarded(addr, n, nil)
		if err != nil {
			err = p.freeOutside(addr, n, err)
		}
		if err == nil && p.closed.Load() {
			// Out of freeGuarded's locks: finishClose holds every shard, and Blocks, which
			// holds them too, takes the site table's locks.
			p.finishClose(addr)
		}
		return err
	}
	var r fastFree
	if p.big.owns(n) {
		if r.done, r.held = p.tryFreeBig(addr, n); r.done { // freeRest's first case
			if guard && p.closed.Load() {
				p.finishClose(addr)
			}
			return nil
		}
	}
	if p.fast && !r.done && !r.held {
		if s, h := p.enteredHeap(procpin.Pin()); s == nil { // as Free's fast path
			procpin.Unpin()
		} else {
			done, held := h.TryFreeOrHeld(addr, n)
			r = p.freeHeldIn(s, h, addr, n, done, held, guard)
		}
	}
	return p.freeRest(addr, n, guard, r)
}

// fastFree is what a fast section did with a free: done, or found the block held (held, its
// tag when found), and the list it deferred the buffer to, the shard's cache full (claimed).
type fastFree struct {
	done, held bool
	tag        *atomic.Uintptr
	claimed    *streamList
}

// freeHeldIn ends the fast section on s (whose heap h reported done and held for the buffer at
// addr). It is deferTagged's case of a buffer recorded on one stream (RecordStream then Free),
// never blocking: when the tag names the stream of the cache's list, or else of the list check
// found last, it takes the tag back to tagNone, and the buffer goes to that list (claimed: to
// the cache, pend.go, or after the section by enqueue); else deferTagged does the work. Neither
// list is a forgotten stream's (ForgetStream empties the caches, Lists.Forget the list found
// last), so the claim asks nothing of the forgotten streams; one that a ForgetStream takes out
// of the lists meanwhile is not cached (cache), and enqueue frees the buffer (queue).
func (p *Pool) freeHeldIn(s *shard, h *heap.Heap, addr, n uintptr, done, held, guard bool) fastFree {
	r := fastFree{done: done, held: held}
	// A Sharer, or a Hold's table, is asked first: freeRest.
	if held && guard && p.order != nil && p.sharer == nil && p.out.active.Load() == 0 {
		// Recorded on one stream, most likely: defer it in this fast section.
		if r.tag = h.NearTag(addr); r.tag != nil {
			if t := r.tag.Load(); t > tagHeld { // one stream recorded
				l := s.pendL // the cache's stream is the one recorded, most likely
				if l == nil || streamOf(l) != tagStream(t) {
					l = p.order.lists.Last()
				}
				if l != nil && streamOf(l) == tagStream(t) && p.order.claim(r.tag, t, nil) {
					r.claimed = l
					if !p.closed.Load() && p.cache(s, l, deferred{addr: addr, n: n}) {
						r.done, r.claimed = true, nil
					}
				}
			}
		}
	}
	p.exit(s)
	return r
}

// freeRest finishes a free of the buffer at addr of n bytes after the fast section's r (the
// zero fastFree where none ran): by the blocking paths, or deferred while a stream may use it.
func (p *Pool) freeRest(addr, n uintptr, guard bool, r fastFree) error {
	if guard && p.sharer != nil {
		if done, err := p.sharedOrForeign(addr, n, r, nil); done {
			return err
		}
	}
	if guard && !r.done && r.claimed == nil {
		if handled, err := p.out.deferFree(addr, n, false, 0, false); handled { // held: hold.go
			return err
		}
	}
	var err error
	switch {
	case r.done:
		if r.held {
			p.order.verify()
		}
	case r.claimed != nil:
		err = p.enqueue(r.claimed, deferred{addr: addr, n: n})
	case guard && p.order != nil && r.held: // a stream may use it, and the size is checked
		err = p.order.deferHeld(addr, n, r.tag)
	case guard && p.order != nil && p.g.Held(addr): // a stream may use it: see stream.go
		err = p.order.deferFree(addr, n, nil)
	default:
		if err = p.freeSlow(addr, n, false); guard && errors.Is(err, heap.ErrHeld) {
			err = p.freeHeld(addr, n) // held since: a stream's copy or a Hold raced the free
		}
	}
	if err != nil && guard {
		err = p.freeOutside(addr, n, err)
	}
	if err != nil {
		if ours(err) {
			return err
		}
		if p.released.Load() {
			// Not a live buffer (those keep the pool's memory), and the memory is gone.
			return fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return wrapError(err, ErrNotOwned)
	}
	if guard && p.closed.Load() {
		p.finishClose(addr)
	}
	return nil
}

// buffer returns the buffer b names to a free (Free, FreeAsync): its start and capacity (see
// the package doc: the heap then refuses a size that is not the block's, ErrSubSlice, or an
// address that does not start one), or why b names none.
func (p *Pool) buffer(b []byte) (addr, n uintptr, err error) {
	if cap(b) == 0 {
		return 0, 0, errEmptySlice
	}
	if p.released.Load() {
		return 0, 0, ErrClosed
	}
	return mem.Addr(b), uintptr(cap(b)), nil
}

// errEmptySlice is a free's, or a record's, of an empty slice.
var errEmptySlice = fmt.Errorf("%w: empty slice", ErrNotOwned)

// freeSlow frees the buffer at addr of n bytes, held or not (heap.Group.FreeHeld), by the
// paths that need no fast section.
func (p *Pool) freeSlow(addr, n uintptr, held bool) error {
	switch {
	case n > heap.MaxClassSize: // a page (or chunk run) of its own: free it where it can go back
		return p.freeLarge(addr, n, held)
	case held:
		return p.g.FreeHeld(addr, n)
	}
	return p.g.FreeSized(addr, n)
}

// freeLarge frees as the owning shard's holder, so that the memory of a large buffer is
// reusable (and its chunks purgeable) at once, when it can hold the shard without waiting for
// its mutex: a spill shard or the caller's P's home shard, or, for a huge object, any shard
// (revoked, then a barrier and the end of its fast section: microseconds, small beside what
// the memory is worth). It never waits for a mutex, as Free may hold the site table's, which
// Blocks takes while it holds every shard. Otherwise it frees the lock-free way, and the owner
// takes the buffer back at its next blocking allocation or collection.
func (p *Pool) freeLarge(addr, n uintptr, held bool) error {
	h, err := p.g.Owner(addr)
	if err != nil {
		return err
	}
	s := (*p.shards.Load())[h.Index()] // the group's heaps are the shards, made in order
	owned := p.tryOwn(s) || n > heap.HugeThreshold && p.tryHold(s)
	switch {
	case !owned && held:
		return p.g.FreeHeld(addr, n)
	case !owned:
		return p.g.FreeSized(addr, n)
	case held:
		err = h.FreeHeld(addr, n)
	default:
		err = h.FreeSized(addr, n)
	}
	letGo(s)
	return err
}
