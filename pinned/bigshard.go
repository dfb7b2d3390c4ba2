package pinned

import (
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/procpin"
)

// The big shard.
//
// Where memory commits 2 MiB at a time (CUDAHost over VMM host memory), each shard keeps a few
// partly used chunks of its own at a peak, and the requests that fill chunks are those that
// take a page of their own (heap.Group.OwnPageMin): above 64 KiB there, never served from a
// class page. A pool of several shards sends them to one more shard, the big shard, when its
// mutex is free, as the Go runtime allocates its large objects from one heap: their chunks are
// then shared as one shard's are, and the pool holds about what one shard would (issue 38).
// When another goroutine holds the big shard, the request goes to the P's home shard as any
// other, and so do that P's next few (bigBackoff): large allocations never queue on one lock
// and scale over the Ps as before, and only those that overlap give up some of the sharing.
//
// The big shard is no P's home, so no fast section enters it: its mutex alone makes a holder
// (its fast paths take nothing else; revoked, which only stops fast sections, is counted by
// the blocking paths as for any shard).
// Its own fast paths (tryAllocBig, tryFreeBig) run the heap's non-blocking entry points (a
// kept object page of about the size) when its mutex is free. Alloc and Free try them first
// for such sizes (Pool.fastMax sends those past their own fast sections), then the home
// shard's fast section, which serves what the home shard took while the big shard was busy.

// bigShard is a pool's big shard, made by the first request for it; min is zero in pools
// without one (memory that commits a host page at a time, or a single shard).
type bigShard struct {
	s   atomic.Pointer[shard]
	min uintptr // the smallest request it takes
}

// owns reports whether a request (or a buffer) of n bytes belongs to the big shard.
func (b *bigShard) owns(n uintptr) bool { return b.min != 0 && n >= b.min }

// bigBackoff is how many of a P's requests of the big shard's sizes that need a blocking path
// go to its home shard once one found the big shard held, that one among them: under
// contention the Ps' large requests spread over their home shards, as they did before the big
// shard (its mutex's cache line no longer passes between their CPUs at every request), and
// each P tries the big shard again after that many. Meanwhile the P's requests that its home
// shard's kept pages serve (fast sections) count for nothing.
const bigBackoff = 16

// ownFor is own for a request of n bytes: the big shard for its sizes when its mutex is free
// (made the first time) and the caller's P is not backing off (one request fewer to back off
// for when it is), else own's shard.
func (p *Pool) ownFor(n uintptr) *shard {
	if !p.big.owns(n) {
		return p.own()
	}
	s := p.big.s.Load()
	if s == nil {
		if s, _ := p.newShard(slotBig); s != nil {
			return s
		}
		return p.own() // made by another goroutine meanwhile, or the pool is closed
	}
	hs := p.homeHere()
	var skip uint32
	if hs != nil {
		skip = hs.skipBig.Load()
	}
	switch {
	case skip > 0:
		hs.skipBig.Store(skip - 1)
	case s.tryLock():
		return s
	case hs != nil:
		hs.skipBig.Store(bigBackoff - 1) // this request is the first
	}
	return p.own()
}

// tryAllocBig is the big shard's fast path for a request of its sizes: the heap's non-blocking
// allocation when its mutex is free and the caller's P is not backing off.
func (p *Pool) tryAllocBig(n uintptr) (addr uintptr, ok bool) {
	s := p.big.s.Load()
	if s == nil {
		return 0, false
	}
	hs := p.homeHere()
	if hs != nil && hs.skipBig.Load() > 0 {
		return 0, false
	}
	if !s.mu.TryLock() { // its mutex alone: see the file's documentation
		p.heldBig(hs)
		return 0, false
	}
	if !p.closed.Load() { // see allocOnce
		addr, ok = s.h.TryAlloc(n)
	}
	s.mu.Unlock()
	return addr, ok
}

// tryFreeBig is the big shard's fast path for a free of a buffer of its sizes: the heap's
// non-blocking free (TryFreeOrHeld), which keeps a freed object page for the next request of
// its size, when its mutex is free and the caller's P is not backing off (its buffers then
// most likely come from its home shard).
func (p *Pool) tryFreeBig(addr, n uintptr) (freed, held bool) {
	s := p.big.s.Load()
	if s == nil {
		return false, false
	}
	hs := p.homeHere()
	if hs != nil && hs.skipBig.Load() > 0 {
		return false, false
	}
	if !s.mu.TryLock() {
		p.heldBig(hs)
		return false, false
	}
	freed, held = s.h.TryFreeOrHeld(addr, n)
	s.mu.Unlock()
	return freed, held
}

// homeHere returns the home shard of the caller's P, nil when it has none (yet). The goroutine
// may move to another P at once: what it is used for (heldBig's count) needs no more.
func (p *Pool) homeHere() *shard {
	if i := procpin.ID(); i < len(p.home) {
		return p.home[i].Load()
	}
	return nil
}

// heldBig notes, in home shard hs (nil: none), that its P found the big shard held.
func (p *Pool) heldBig(hs *shard) {
	if hs != nil {
		hs.skipBig.Store(bigBackoff)
	}
}

// bigLender lends the big shard's heap to the other shards (heap.RoomLender): their new class pages
// take room in its runs whenever its mutex is free, so that the small buffers of every shard
// share chunks as its large ones do, where each shard kept partly used chunks of its own
// (issue 38). It never waits for the mutex: a shard that finds it held places the page in its
// own runs. A page given back goes back at once when the mutex is free (as it is while each
// holds another shard: a Trim or Close), else at the big shard's next blocking call. It lends
// once the big shard exists (the first request above 64 KiB): a pool of small buffers alone
// keeps its class pages in each shard's chunks, where the lending showed no gain.
type bigLender struct{ p *Pool }

// TryLend returns the big shard's heap, the caller its holder, when its mutex is free.
func (l bigLender) TryLend() *heap.Heap {
	if s := l.p.big.s.Load(); s != nil && s.mu.TryLock() { // its mutex alone: see above
		return s.h
	}
	return nil
}

// EndLend lets the big shard go after a TryLend that returned its heap.
func (l bigLender) EndLend() { l.p.big.s.Load().mu.Unlock() }
