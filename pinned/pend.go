package pinned

import (
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/procpin"
)

// FreeAsync's per-shard cache.
//
// A FreeAsync of a buffer no stream was recorded on holds it (heap.Group.HoldSized, from any
// goroutine), and a free of a buffer recorded on one stream only finds it so (its use goes); then,
// in a fast section of the caller's P's shard (shard.go), appends it to the shard's pend cache
// when the cache is empty or holds buffers of the same stream: no lock, and an atomic add only
// when the cache was empty (streamOrder.cached), where the stream's list costs a mutex and the
// weight an atomic add per buffer. The shard's own allocation, on its slow path (as the shard's
// holder), takes a full cache back itself when its stream is idle (drainPend: one query, then the
// blocks straight back on the shard's pages, with no list); the cache goes on the stream's list,
// in one lock, when that stream is busy, when another stream comes or a FreeAsync finds it full
// (by that FreeAsync, out of its fast section), when the slow path reclaims (before the reclaim,
// which then polls it), and before every reclaim that waits (Stats, Trim, ForgetStream, Close, a
// quota refusal, an allocation that found the pool full), which holds every shard for it
// (flushAll). Nothing else reads the cache: its buffers are held in the heap, so no free, Alloc or
// RecordStream can touch them, and a double free of one is refused as for any deferred buffer.
//
// A cached buffer is in no list and weighs nothing yet: Usage does not count it as deferred,
// streamOrder.cached (the number of caches not empty, and of caches on their way to a list) is
// what tells a quota refusal that a reclaim may give something back, and the point (drainPend's
// idle query, or the lists' event or query at the reclaim after the flush) comes after the free,
// as ordering after the stream requires. After Close a FreeAsync skips the cache, so that the
// release sees every deferred buffer on a list: it reads closed inside its fast section, so that
// Close's flush of every cache leaves none that fills again, and Close waits for the caches
// taken out before (Pool.waitCachesOut).

// pendMax is the most buffers a shard's cache holds, each of pendBuffer bytes at most (2 MiB
// in all; larger buffers go on their stream's list at once). The cache's one query is shared by
// as many frees: an idle stream's query costs the fake driver about 140 ns, 4.5 ns a FreeAsync
// pair at 32 buffers, 1.1 at 128. On one CPU (taskset -c 1, alternated, minimums) the
// FreeAsync pair took 2.2x a plain pair at 32, 1.98x at 64 and 1.89x at 128; RecordStream and
// Free 3.2x, 2.99x and 2.90x.
const (
	pendMax    = 128
	pendBuffer = 16 << 10
)

// freeAsync is FreeAsync of the buffer at addr, of n bytes, on the stream of l, with no guard.
func (p *Pool) freeAsync(addr, n uintptr, l *streamList) error {
	if p.fast && n <= heap.MaxClassSize {
		// The hold and the cache in one fast section, when the buffer is of a page in the
		// shard's page cache (heap.Heap.TryHoldSized): one pin, no lookup in the group's tables.
		if invariants.Enabled && beforeCacheSection != nil {
			beforeCacheSection()
		}
		if s, h := p.enteredHeap(procpin.Pin()); s == nil {
			procpin.Unpin()
		} else {
			first, ok := h.TryHoldSized(addr, n)
			if ok && first && !p.closed.Load() && p.cache(s, l, deferred{addr: addr, n: n}) {
				p.exit(s)
				return nil
			}
			p.exit(s)
			if done, err := p.afterHold(addr, n, l, first, ok); done {
				return err
			}
		}
	}
	first, err := p.g.HoldSized(addr, n)
	if err != nil {
		return wrapError(err, ErrNotOwned)
	}
	if !first { // streams recorded on it: the uses path
		return p.order.deferFree(addr, n, l)
	}
	return p.enqueue(l, deferred{addr: addr, n: n})
}

// afterHold finishes a FreeAsync on the stream of l whose fast section held the buffer at addr
// (ok: first says no stream was recorded on it) and could not cache it: the cache was full or
// of another stream (enqueue), or streams were recorded on it (deferFree). done false says the
// fast section held nothing: the slow path does the work. That is so, too, of a buffer held
// already in a pool with a Sharer or a Hold (hold.go, share.go): the slow path asks them.
func (p *Pool) afterHold(addr, n uintptr, l *streamList, first, ok bool) (done bool, err error) {
	switch {
	case ok && first:
		return true, p.enqueue(l, deferred{addr: addr, n: n})
	case ok && p.sharer == nil && p.out.active.Load() == 0:
		return true, p.order.deferFree(addr, n, l)
	}
	return false, nil
}

// enqueue defers d, a held buffer that waits for the stream of l only: to the cache of the
// caller's P's shard when it can, else to l; or frees it, when l left the lists and its stream
// was forgotten (ForgetStream) since the caller found l: the stream has passed it (queue).
func (p *Pool) enqueue(l *streamList, d deferred) error {
	o := p.order
	if beforeEnqueue != nil {
		beforeEnqueue()
	}
	if p.fast && d.n <= pendBuffer {
		if invariants.Enabled && beforeCacheSection != nil {
			beforeCacheSection()
		}
		if s := p.entered(procpin.Pin()); s == nil { // a fast section: see shard.go
			procpin.Unpin()
		} else if p.closed.Load() { // read in the section: see waitCachesOut
			p.exit(s)
		} else if p.cache(s, l, d) {
			p.exit(s)
			return nil
		} else if l.Left() { // l is never a cache's (see cache): d goes on the list
			p.exit(s)
		} else {
			// Full, or of another stream (so not empty, and counted in cached: see cache):
			// move it to the list, out of the fast section. On their way there its buffers are
			// in no cache and on no list: cached counts them as one more cache, so that a quota
			// refusal sees them coming back (returning) even when the shard's cache empties
			// meanwhile.
			var out [pendMax]deferred
			k := copy(out[:], s.pend)
			ol := s.pendL
			s.pend = append(s.pend[:0], d)
			s.pendL = l
			o.cached.Add(1)
			p.exit(s)
			if afterCacheOut != nil {
				afterCacheOut()
			}
			var err error
			if !o.queueMany(ol, out[:k]) { // forgotten since the cache took ol: all passed
				err = o.freeAll(out[:k], nil)
			}
			o.cached.Add(-1) // after the frees: see waitCachesOut
			o.verify()
			return err
		}
	}
	if !o.queue(l, d) {
		return o.free(d, nil)
	}
	o.verify()
	return nil
}

// afterCacheOut, when set (by tests), runs in enqueue between the fast section that took a
// shard's cache out and the push of its buffers on their stream's list; beforeEnqueue in
// enqueue before anything else.
var afterCacheOut, beforeEnqueue func()

// beforeCacheSection, when set (by tests), runs in freeAsync and enqueue just before the fast
// section that may cache a buffer, in builds with invariants.Enabled only (-tags invariants,
// where there are fast sections; -race, where there are none): the other builds compile no
// look at it on that path.
var beforeCacheSection func()

// freeAll frees bufs, deferred buffers none of which is shared, whose streams have passed them
// (Pool.freeDeferred: on's own straight back on their pages, on the heap of a shard the caller
// holds, or nil), and returns the first error.
func (o *streamOrder) freeAll(bufs []deferred, on *heap.Heap) error {
	var first error
	for _, d := range bufs {
		if o.direct && on != nil && on.TryFreeHeld(d.addr, d.n) {
			continue
		}
		if err := o.free(d, on); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// cache appends d, a held buffer that waits for the stream of l only, to the cache of shard s,
// in a fast section of s, and reports whether it could: d is small enough (pendBuffer), the
// cache has room and is empty or of l, and l is in the lists.
//
// A list that left them (Left, read in the section) never becomes the cache's, so that no cache
// holds a forgotten stream's list once ForgetStream has returned (a cache that took its list
// before it left keeps it, FreeAsync's fast path appending with no look, until it drains or
// flushes: drainPend's streamq Idle reads the stream's refusal for such a list): FreeAsync's
// fast path would take it
// for the list of a new stream given the same handle, with no check, and its push (flush) would
// free that stream's buffers at once, as a forgotten stream's (queue). ForgetStream flushes the
// caches again after the forget when cached is not zero, which catches a cache that took the list
// before it left: an empty cache counts itself (cached) before its look at Left, so that either
// the look sees the list gone or ForgetStream's look at cached, after the list left, sees the
// cache (sequentially consistent atomics); a cache not empty is counted already. The flush waits
// for the sections under way.
func (p *Pool) cache(s *shard, l *streamList, d deferred) bool {
	if d.n > pendBuffer || len(s.pend) == cap(s.pend) || len(s.pend) > 0 && s.pendL != l {
		return false
	}
	if len(s.pend) == 0 {
		p.order.cached.Add(1) // once per filling of the cache; before the look at Left
	}
	if l.Left() {
		if len(s.pend) == 0 {
			p.order.cached.Add(-1)
		}
		return false
	}
	s.pend = append(s.pend, d)
	s.pendL = l
	return true
}

// pendEmptied empties the cache of shard s, its buffers gone to their pages or to a list.
func (p *Pool) pendEmptied(s *shard) {
	clear(s.pend)
	s.pend, s.pendL = s.pend[:0], nil
	p.order.cached.Add(-1)
	p.order.verify()
}

// drainPend takes back the buffers of the cache of shard s, which the caller holds (full, on
// the allocation's slow path), as a reclaim's poll would, with none of its lists: when their
// stream is idle (a query after their frees, so the stream has passed them) they go straight
// back on the shard's pages (heap.Heap.TryFreeHeld, or Pool.freeDeferred), with no event and
// no lock; else, or when the driver refuses the stream, the cache goes on its list (flush), for
// the reclaims, which place its point or find it lost (a refusal of the handle noted on the list
// first: streamq's NoteRefused). A cache whose list has left the lists (FreeAsync's fast path
// appends under it with no look) is asked through it all the same: streamq's Idle reads the
// refusal noted on the stream's list in the lists, which the driver's query of a handle given
// to a new stream since would not say.
func (p *Pool) drainPend(s *shard) {
	o := p.order
	if idle, err := o.lists.Idle(s.pendL); err != nil || !idle {
		if err != nil {
			// A refusal of the handle (the stream destroyed) is the list's before its buffers
			// are: the driver may give the handle to a new stream before a reclaim polls it.
			o.lists.NoteRefused(s.pendL, err)
		}
		p.flush(s)
		return
	}
	// A free of a buffer its stream has passed fails only where the pool's own state is broken
	// (a cached buffer is a held block), which invariants builds check, as a reclaim's frees.
	_ = o.freeAll(s.pend, s.h)
	p.pendEmptied(s)
}

// flush moves the cache of shard s, which the caller holds, to its stream's list, or frees its
// buffers on the shard's heap when that stream was forgotten (ForgetStream) since the cache
// took its list: it has passed them (queue).
func (p *Pool) flush(s *shard) {
	if len(s.pend) == 0 {
		return
	}
	if !p.order.queueMany(s.pendL, s.pend) {
		_ = p.order.freeAll(s.pend, s.h) // as drainPend
	}
	p.pendEmptied(s)
}

// flushAll moves every shard's cache to the lists, holding each shard in turn.
func (p *Pool) flushAll() {
	if !p.fast || p.order == nil {
		return
	}
	ss := *p.shards.Load()
	p.revoke(ss)
	for _, s := range ss {
		s.take()
		p.flush(s)
		letGo(s)
	}
}
