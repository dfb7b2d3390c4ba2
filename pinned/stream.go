package pinned

import (
	"errors"
	"fmt"
	"github.com/pinmalloc/pinmalloc/internal/units"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/procpin"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Stream-ordered reuse.
//
// The CUDA driver copies to and from page-locked memory it knows (the CUDAHost backend, or an
// External region of kind HostPinned) asynchronously: cuMemcpyHtoDAsync returns before it has
// read the buffer, cuMemcpyDtoHAsync before it has written it. A buffer freed after queuing
// such a copy must not be handed out again, scrubbed or unmapped until the stream has passed
// the copy, or the copy sends the next owner's bytes, or lands in them. Such a pool orders its
// reuse after the streams (streamOrder); other pools need nothing, since the driver copies
// memory it does not know as pageable memory, before the call returns.
//
//   - A buffer a stream uses is held in the heap (heap.Group.Hold): every free refuses it, and
//     the fast path's TryFree refuses it at no cost to buffers never held.
//   - RecordStream, and device.Heap's async copies (which find the pool with PoolOf), record the
//     stream on the buffer, whatever part of it the copy touched (keying by the data pointer missed
//     slices: pytorch#69124): in the block's tag when it is the buffer's only stream (no lock, no
//     map: streamtag.go), else in uses, keyed by the start of the buffer.
//   - A free of a held buffer (Free of a recorded one, FreeAsync of any) defers it: the buffer
//     joins the open list of each stream it waits for, and is freed for real (scrubbed first,
//     with ZeroOnFree) once the last of them has passed the free.
//   - A stream's open list gets its point lazily, when the pool reclaims: a stream found idle
//     (cuStreamQuery) frees its buffers with no event; a busy one gets one event, from a pool,
//     for its whole list, and no other until that one has completed. A buffer used on one
//     stream and freed on it costs no event, and a busy stream one event at a time however
//     many buffers wait on it (an event per copy doubled the cost of copies: cutorch#698). An
//     event recorded after the free completes after the free's point, never before, so the
//     later point is safe; it only makes reuse later.
//   - Lists are per stream, and each stream's buffers are freed in its own order: a slow or
//     stuck stream holds back its own buffers only (one stuck event stalled PyTorch's single
//     queue: pytorch#183501).
//   - Reclaims run on the allocation's slow path (when the fast path found no block), as the
//     shard's holder, once the buffers waiting weigh reclaimWeight (see weigh), so that a
//     reclaim's driver calls are shared by many buffers; the shard's own blocks go straight
//     back on their pages (heap.TryFreeHeld), which stay for the allocation; a full FreeAsync
//     cache of the shard's (pend.go) whose stream is idle goes back so with no reclaim and
//     no list (drainPend: one query, the same point a reclaim's poll takes). They run too when
//     the pool is out of memory or over its quota, in Trim and Stats, and in Close, which
//     waits for them (5 s at most, then ErrBusy). One goroutine reclaims at a time; the
//     others go on (or, where they need its result, wait for it).
//   - A stream the driver no longer accepts (destroyed with buffers deferred on it) cannot take
//     an event: the pool synchronizes the context, once for all such streams a reclaim finds,
//     which waits for the work they still had.
//
// Per-stream state (streamlist.go: internal/streamq's Lists) costs O(1) per call and lives only
// while a stream has buffers deferred on it: lists sit in a map under the lists' lock, a reclaim
// walks only the lists in it, and a list found empty at two reclaims in a row leaves it
// (ForgetStream drops it at once). A stream new to the pool is checked once with the driver (an
// event of the pool's device recorded on it); one whose list left is checked again, except the
// stream check found last, which stays trusted. The contract that makes that safe is device.Heap's:
// forget a stream (ForgetStream) before destroying it, since the driver may give its handle to a
// new stream, of another device even. The per-thread default stream (CU_STREAM_PER_THREAD) is
// refused: the pool queries and records its streams from whatever OS thread it runs on, where that
// handle names another thread's stream.
//
// The files: this one has the state and the API (FreeAsync, RecordStream), streamtag.go what a
// buffer's tag says, streamlist.go the pool's side of the per-stream lists (internal/streamq's
// Lists keep them, with their points), reclaim.go the reclaims, pend.go FreeAsync's per-shard
// cache, forget.go ForgetStream, verify.go the invariants. The driver is reached through
// internal/streamq's Points (events from a pool, idle queries, waits), as device.Heap's and
// uvm.Tier's queues reach it.
//
// Lock order: the holds table's counting lock (hold.go: Close holds it while it counts the live
// buffers, a last Release read-holds it while it makes its free) → a pool shard (the allocation's
// slow path reclaims as its holder) → reclMu (taken with TryLock there) → a uses shard's lock →
// the lists' lock → a stream list's lock. Buffers are freed for real holding none of the last
// three. forgetMu comes after reclMu (ForgetStream) and before the lists' lock (WaitStreams). A
// holds table shard's lock (hold.go) comes before a uses shard's: a free that claims a buffer's
// tag while some buffer is held holds it until the claim (deferTagged).

// closeWait bounds how long Close waits for deferred buffers, and a free after Close for the
// streams of its own buffer.
var closeWait = 5 * time.Second

// useShards is the number of locks over uses.
const useShards = 16

// noStream stands in a use for no stream: the streams recorded were all forgotten since
// (ForgetStream), so they have passed the work recorded, and a use left with none frees at
// once.
const noStream = ^cuda.Stream(0)

// streamOrder is a pool's stream-ordered reuse; nil for pools that need none.
type streamOrder struct {
	// lists are the buffers deferred on each stream (streamlist.go, internal/streamq's Lists),
	// whose points are the pool's device's (opened for an External region) and its events.
	lists *streamq.Lists[deferred]
	g     *heap.Group
	// free frees a buffer for real (Pool.freeDeferred), straight back on its page when it is
	// a block of the heap given (the shard a reclaim holds), else by the paths of any goroutine.
	free func(deferred, *heap.Heap) error
	// direct says that free does nothing but give the block back (no ZeroOnFree scrub, no
	// quota to count): a reclaim on a shard's heap then calls heap.Heap.TryFreeHeld itself.
	direct bool
	// enqueue defers a buffer that waits for one stream only (Pool.enqueue: the shard's cache,
	// or the stream's list), or frees it when that stream was forgotten meanwhile.
	enqueue func(*streamList, deferred) error
	// holds is the pool's holds table (hold.go), which a free of a held buffer looks at
	// before it claims the buffer's tag (deferTagged); nil in a state built by a test.
	holds *outside

	// sharedWeight is the deferred buffers with uses, each weighed by its size (weigh); the
	// lists weigh the others, and the two make the weight (streamOrder.weight). A shared
	// buffer's weight is added under its use shard's lock and taken off by the reclaim that
	// frees it; the lists add and take off the others' under their list's lock.
	sharedWeight atomic.Int64
	// shared and sharedBytes count the deferred buffers with uses (on a stream list each);
	// the lists count the others.
	shared, sharedBytes atomic.Int64
	// cached is the number of shards whose FreeAsync cache (pend.go) holds buffers, and of
	// caches taken out of a shard and not yet on their list: they weigh nothing until flushed,
	// so a quota refusal that finds weight zero reclaims still when it is not zero.
	cached atomic.Int32
	// returned counts the deferred buffers given back to the heap in a pool with a quota
	// (Pool.giveBack), so that a quota refusal can tell whether any left the quota since its
	// sum (Pool.quotaRoom).
	returned atomic.Uint64

	uses   [useShards]useShard
	reclMu sync.Mutex
	done   []deferred // reclaim's scratch, under reclMu
	// freeDones counts freeDone's calls, under reclMu: the take-backs of what a reclaim, a
	// drain or a forget took off the lists (reclaims).
	freeDones uint64
	// forgetMu makes WaitStreams' look at whether a stream was forgotten and its wait for the
	// stream one step against ForgetStream's forget (waitStreams read-holds it across both,
	// forget holds it while it marks the stream forgotten): a ForgetStream, and the destroy
	// after it, then comes wholly before the look (no wait) or after the wait. Between them, the
	// wait synchronized a destroyed handle (a spurious error) or the stream the driver gave it
	// to since. Neither is a hot path; it comes after reclMu.
	forgetMu sync.RWMutex
}

// useShard is a lock and the buffers with streams recorded whose start it covers.
type useShard struct {
	mu sync.Mutex
	m  map[uintptr]use
	_  [40]byte
}

// use is what the pool knows of a held buffer with several streams recorded (tagMulti), or
// with several streams' frees pending.
type use struct {
	one   cuda.Stream   // the first stream recorded; noStream when ForgetStream took them all
	more  []cuda.Stream // the others, rarely any
	freed bool          // a free is deferred
	left  int           // once freed: the streams still to pass it
}

// add records s, once.
func (u *use) add(s cuda.Stream) {
	if s == u.one {
		return
	}
	if u.one == noStream {
		u.one = s
		return
	}
	for _, t := range u.more {
		if t == s {
			return
		}
	}
	u.more = append(u.more, s)
}

// dropForgotten takes off u the streams forgotten since they were recorded (ForgetStream):
// they have passed the work recorded.
func (u *use) dropForgotten(ls *streamq.Lists[deferred]) {
	more := u.more[:0]
	for _, s := range u.more {
		if !ls.Forgotten(uintptr(s)) {
			more = append(more, s)
		}
	}
	u.more = more
	if u.one != noStream && ls.Forgotten(uintptr(u.one)) {
		u.one = noStream
	}
	if u.one == noStream && len(u.more) > 0 {
		u.one, u.more = u.more[0], u.more[1:]
	}
}

// deferred is a buffer whose free waits for a stream. shared says it waits for others too, and
// has a use that counts them (use.left); the lists count the others (streamList.n).
type deferred struct {
	addr, n uintptr
	shared  bool
}

// weigh is what a buffer of n bytes adds to streamOrder.weight: one, and one more for each
// 16 KiB.
func weigh(n uintptr) int64 { return 1 + int64(n>>14) }

// newStreamOrder returns the stream-ordered reuse a pool over provider prov needs (nil for
// none), opening device ordinal for an External region of pinned memory.
func newStreamOrder(prov arena.Provider, ordinal int) (*streamOrder, error) {
	if prov.Kind() != arena.HostPinned {
		return nil, nil
	}
	var points *streamq.Points
	var err error
	if d, ok := prov.(interface{ Device() *cuda.Device }); ok {
		if points, err = streamq.Of(d.Device()); err != nil {
			return nil, err
		}
	} else {
		// The caller's pinned memory: without a driver nothing copies it asynchronously.
		if points, err = streamq.Open(ordinal); err != nil {
			return nil, fmt.Errorf("%w: CUDA device %d, for the streams that copy the External region: %w", ErrInvalidOptions, ordinal, err)
		}
		if points == nil {
			return nil, nil
		}
	}
	o := &streamOrder{lists: newLists(points)}
	for i := range o.uses {
		o.uses[i].m = map[uintptr]use{}
	}
	return o, nil
}

// start begins serving the pool's group: free frees a deferred buffer for real
// (direct: by a free of its block and nothing else), enqueue defers one that waits for one
// stream; holds is the pool's holds table.
func (o *streamOrder) start(g *heap.Group, free func(deferred, *heap.Heap) error, direct bool, enqueue func(*streamList, deferred) error, holds *outside) {
	o.g, o.free, o.direct, o.enqueue, o.holds = g, free, direct, enqueue, holds
}

// close ends it, once no buffer is deferred.
func (o *streamOrder) close() error { return o.points().Close() }

// shard returns the uses shard of the buffer starting at base.
func (o *streamOrder) shard(base uintptr) *useShard {
	return &o.uses[(base>>6^base>>16)%useShards]
}

// FreeAsync frees buffer b in the order of CUDA stream s, as cudaFreeAsync frees device
// memory: copies and kernels queued on s before the call may still read and write b, and b is
// handed out again (or scrubbed, with ZeroOnFree) only after s has passed them, as well as
// every stream recorded on b (RecordStream, device.Heap's async copies). The pool takes b back
// lazily: on later allocations that find no free block, Trim, Stats, Usage and Close.
//
// After Close, FreeAsync of the last live buffer (like a Free of one a stream uses) waits for
// that buffer's streams, 5 s at most, so that the pool's memory goes with it; it
// never waits for other buffers' streams (a later Close, Free or Trim releases the memory once
// they have passed).
//
// b must be a whole buffer, or one resliced from its start, as for Free. s is a stream of the
// pool's device (Options.Device; the legacy default stream, 0, is taken as that device's: work
// queued on another device's, which the pool cannot tell apart, is not waited for),
// forgotten (ForgetStream) before it is destroyed; one the driver refuses, and the per-thread
// default stream, give an error wrapping ErrInvalidStream. An event the driver cannot make to
// check a stream new to the pool with is not the stream's fault: ErrOutOfMemory where memory
// ran out, else ErrRefused, s not asked, b still the caller's (try again, or Free it). A pool
// whose memory the driver does
// not copy asynchronously (Locked, Pageable, an External region that is not HostPinned, or
// HostPinned with no driver) frees b at once: the driver copies such memory as pageable
// memory, before the copy call returns.
//
// While s captures a CUDA graph (cuStreamBeginCapture), the pool's reclaims ask nothing of s
// and record nothing there, so the capture stays valid, and its frees wait for the capture to
// end. A buffer a graph uses must outlive the graph: free it once the graph is destroyed; one
// freed on s during the capture is reused once s has passed the free after the capture ends,
// whether the graph has been launched or not. The reclaim's ask whether s captures and the
// query or record it allows are separate driver calls: a capture begun with another binding
// (cuda has no capture call) on another thread in the instant between them is invalidated by
// a query (its end fails), while a point recorded then is found and not trusted (the frees
// still wait), unless that capture also ends within the record, before the pool asks again:
// then the point stands for nothing, and a buffer freed on s may be reused while work queued
// before the free still runs. A capture begun while no call of the pool runs on another
// goroutine, and with the purge timer off (a negative Options.PurgeDelay), is safe.
func (p *Pool) FreeAsync(b []byte, s cuda.Stream) error {
	o := p.order
	if o == nil {
		return p.Free(b)
	}
	// The fast path, written out here so that it costs one call: a fast section of the
	// caller's P's shard whose FreeAsync cache holds buffers of s already (s's list, checked
	// then, is the cache's): the hold and the cache (pend.go's freeAsync has the rest).
	if p.fast && !p.guarded && cap(b) != 0 && uintptr(cap(b)) <= pendBuffer {
		addr, n := mem.Addr(b), uintptr(cap(b))
		if sh, h := p.enteredHeap(procpin.Pin()); sh == nil {
			procpin.Unpin()
		} else if l := sh.pendL; l == nil || streamOf(l) != s || len(sh.pend) == cap(sh.pend) || p.closed.Load() {
			// closed is read in the section: see waitCachesOut.
			p.exit(sh)
		} else {
			first, ok := h.TryHoldSized(addr, n)
			if ok && first {
				sh.pend = append(sh.pend, deferred{addr: addr, n: n})
				p.exit(sh)
				return nil
			}
			p.exit(sh)
			if done, err := p.afterHold(addr, n, l, first, ok); done {
				return err
			}
		}
	}
	addr, n, err := p.buffer(b)
	if err != nil {
		return err
	}
	l, err := p.order.check(s)
	if err != nil {
		return err
	}
	if p.sharer != nil { // first: a shared buffer's free drops its reference, held or not
		if done, err := p.freeAsyncShared(addr, n, s, l); done {
			return err
		}
	}
	if handled, err := p.out.deferFree(addr, n, true, s, false); handled { // held: hold.go
		return err
	}
	if p.guarded {
		err = p.freeGuarded(addr, n, l)
	} else {
		err = p.freeAsync(addr, n, l)
	}
	if err == nil && p.closed.Load() {
		p.finishClose(addr)
	}
	return err
}

// RecordStream records that CUDA stream s uses buffer b (or the part of a buffer b is): a
// later Free or FreeAsync of the buffer waits until s has passed the work queued on it before
// that free. device.Heap's HtoDAsync and DtoHAsync record their stream themselves; call
// RecordStream for other work that reads or writes the buffer asynchronously (a kernel given
// DevicePointer, a copy made with another binding). Recording costs no event; the free does
// the waiting (see FreeAsync). s is refused as FreeAsync refuses it; a buffer the caller has
// freed, its free done or still waiting for its streams or holds, with ErrDoubleFree, and
// memory of no buffer of the pool with ErrNotOwned. On a pool whose memory the driver copies
// synchronously it only checks b.
func (p *Pool) RecordStream(b []byte, s cuda.Stream) error {
	if p.order == nil {
		_, err := p.unfreed(b)
		return err
	}
	if len(b) == 0 {
		return errEmptySlice
	}
	if p.released.Load() {
		return ErrClosed
	}
	if p.out.active.Load() != 0 {
		// A held buffer whose free waits for its holds' last Release is freed, though its tag
		// says live (tagHeld, or its streams'): refused here, as the record refuses a buffer
		// whose tag says its free is pending (tagNone). With no buffer held, a load.
		if _, err := p.unfreed(b); err != nil {
			return err
		}
	}
	addr, n := mem.Addr(b), uintptr(len(b))
	if p.order != nil && p.fast && n <= heap.MaxClassSize {
		// A buffer of the caller's P's shard, from its start (the usual RecordStream(buf, s)):
		// found in the shard's page cache and held by the owner, in one fast section. The
		// stream is checked first, unless the shard's FreeAsync cache is of s: checked then.
		checked := false
		for try := 0; try < 3; try++ {
			sh, h := p.enteredHeap(procpin.Pin())
			if sh == nil {
				procpin.Unpin()
				break
			}
			if !checked && (sh.pendL == nil || streamOf(sh.pendL) != s) {
				p.exit(sh)
				if _, err := p.order.check(s); err != nil {
					return err
				}
				checked = true
				continue
			}
			done, untagged, r := p.order.recordOwn(h, addr, n, s)
			p.exit(sh)
			if done {
				p.order.verify()
				return nil
			}
			if !untagged {
				break
			}
			// The first record on its page: make the page's tags out of the fast section
			// (it allocates), and try again, so that the page is not shared for it (record's
			// FindFrom shares a page for good).
			r.Tag()
		}
	}
	return p.order.record(addr, n, s)
}

// drain waits, closeWait at most, until no buffer is deferred.
func (p *Pool) drain() error {
	o := p.order
	if o == nil {
		return nil
	}
	deadline := time.Now().Add(closeWait)
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		err := p.reclaim(true)
		if o.weight() == 0 {
			return err
		}
		// After a device fault no wait can tell that a stream passed them: none is made.
		if fault := errors.Is(err, pinmalloc.ErrDeviceFault); fault || time.Now().After(deadline) {
			n, bytes := p.deferred()
			after := fmt.Sprintf("after %v", closeWait)
			if fault {
				after = "past the error below, which every wait meets now"
			}
			return errors.Join(fmt.Errorf("%w: %s (%d bytes) still wait for their streams %s; the pool's memory stays mapped, and a later Close, Free or Trim releases it once the streams have passed them",
				ErrBusy, units.Count(uint64(n), "buffer"), bytes, after), err)
		}
		time.Sleep(wait)
	}
}

// settle waits, closeWait at most, until the buffer at addr is no longer deferred: its own
// streams have passed it. Only a closed pool waits so (see finishClose). A buffer whose free
// waits for its holds is not waited for: the last Release makes the free, and settles it then;
// nor after a device fault, whose error answers every wait.
func (p *Pool) settle(addr uintptr) {
	deadline := time.Now().Add(closeWait)
	for wait := 20 * time.Microsecond; !p.released.Load() && p.g.Held(addr) && !p.out.freedHeld(addr); wait = min(2*wait, 5*time.Millisecond) {
		// A refusal leaves the buffer deferred, the pool busy: the next Close or Trim says it.
		err := p.reclaim(true)
		if errors.Is(err, pinmalloc.ErrDeviceFault) || !p.g.Held(addr) || time.Now().After(deadline) {
			return
		}
		time.Sleep(wait)
	}
}

// deferred returns the number of buffers waiting for their streams and their bytes.
func (p *Pool) deferred() (n, bytes uint64) {
	if p.order == nil {
		return 0, 0
	}
	o := p.order
	t := o.lists.Totals()
	return uint64(o.shared.Load() + t.Items), uint64(o.sharedBytes.Load() + t.Bytes)
}
