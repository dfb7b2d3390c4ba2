package pinned

import (
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/fence"
	"github.com/pinmalloc/pinmalloc/internal/procpin"
)

// The big shard.
//
// Where memory commits 2 MiB at a time (CUDAHost over VMM host memory), each shard keeps a few
// partly used chunks of its own at a peak, and the requests that fill chunks are those that
// take a page of their own (heap.Group.OwnPageMin): above 64 KiB there, never served from a
// class page. A pool of several shards sends them to one more shard, the big shard, when it
// is free, as the Go runtime allocates its large objects from one heap: their chunks are
// then shared as one shard's are, and the pool holds about what one shard would (issue 38).
// When another goroutine holds the big shard, the request goes to the P's home shard as any
// other, and so do that P's next few (bigBackoff): large allocations never queue on one lock
// and scale over the Ps as before, and only those that overlap give up some of the sharing.
//
// The big shard is no P's home, so no home fast section enters it; instead it has fast
// sections of its own, for one P at a time, the P it is biased to (as a biased lock is): a
// goroutine pinned to that P raises its home shard's bigInside flag and enters when it then
// sees the big shard unrevoked and still biased to its P. Nothing else enters without its
// mutex. A P earns the bias when its goroutines took the mutex on the big shard's own fast
// paths biasAfter times in a row (one goroutine's large pairs: tryAllocBig, tryFreeBig), and
// loses it when a goroutine of another P takes the mutex through a blocking path (tryLock:
// revoked, a barrier, the end of the section under way; microseconds, once a change of P),
// so that a P's large pairs cost what a home shard's do (issue 38: the mutex's two atomic
// operations each way were 1.7 times a large pair), and goroutines of several Ps share the
// mutex as before.
//
// Its own fast paths run the heap's non-blocking entry points (a kept object page of about the
// size): in a section on the biased P, else under the mutex when it is free and no P holds the
// bias. Alloc and Free try them first for such sizes (Pool.fastMax sends those past the home
// shard's fast sections), then the home shard's fast section, which serves what the home shard
// took while the big shard was busy.
//
// Invariants, beside shard.go's: bias changes only under the mutex; a section runs only on P
// bias-1, and only between its check of revoked and bias and its flag's clearing; a holder
// that finds the bias another P's clears it, and waits out that P's section, before it touches
// the heap; a holder that took the mutex alone (without raising revoked: the fast paths' mutex
// path) does so only while bias is 0, and pinned to its P until it lets the mutex go, so that
// the bias it may give its own P takes effect only then.

// bigShard is a pool's big shard, made by the first request for it; min is zero in pools
// without one (memory that commits a host page at a time, or a single shard).
type bigShard struct {
	s   atomic.Pointer[shard]
	min uintptr // the smallest request it takes

	bias atomic.Int32 // 1 + the P whose goroutines enter in fast sections; 0 when none
	home []homeSlot   // the pool's: the biased P's home shard holds its sections' flag
	fast bool         // the pool runs fast sections, so a P may earn the bias
	// Under the mutex, counted by its fast paths: the P that last took it, and how many times
	// in a row.
	last   int
	streak int
}

// biasAfter is how many times in a row a P's goroutines take the big shard's mutex on its fast
// paths before the P gets the bias. Losing it costs another P's goroutine a barrier (about
// 1.5 µs on a 2-CPU VM), so that goroutines of two Ps that alternate pay it at most once every
// biasAfter large requests.
const biasAfter = 128

// owns reports whether a request (or a buffer) of n bytes belongs to the big shard.
func (b *bigShard) owns(n uintptr) bool { return b.min != 0 && n >= b.min }

// enter starts a fast section on the big shard s for the caller, pinned to P i, and returns the
// home shard whose flag it raised; nil when the bias is not i's or a holder revoked s. End the
// section with fence.Release(&hs.bigInside, 0), then unpin.
func (b *bigShard) enter(s *shard, i int) *shard {
	if b.bias.Load() != int32(i+1) {
		return nil
	}
	hs := b.home[i].Load() // made before the bias was given
	hs.bigInside = 1       // then the loads below: see fence
	if s.revoked.Load() == 0 && b.bias.Load() == int32(i+1) {
		return hs
	}
	hs.bigInside = 0
	return nil
}

// lockFast takes the big shard s's mutex alone for a fast path of the caller, pinned to P i,
// when it is free, no P holds the bias and i is not backing off (lockAlone). The caller
// unlocks before it unpins. held reports that another goroutine held the mutex.
func (b *bigShard) lockFast(s *shard, i int) (ok, held bool) {
	if b.bias.Load() != 0 {
		// Another P's (its blocking path takes it back: tryLock). Not even a TryLock: the
		// mutex shares a cache line with revoked, which that P's sections read.
		return false, false
	}
	if i < len(b.home) {
		if hs := b.home[i].Load(); hs != nil && hs.skipBig.Load() > 0 {
			return false, false
		}
	}
	return b.lockAlone(s, i)
}

// lockAlone is lockFast past its first looks: the mutex, if free, kept only while no P holds
// the bias (given meanwhile, it is another P's), and i's streak counted.
func (b *bigShard) lockAlone(s *shard, i int) (ok, held bool) {
	if !s.mu.TryLock() {
		return false, true
	}
	if b.bias.Load() != 0 {
		s.mu.Unlock()
		return false, false
	}
	if b.last != i {
		b.last, b.streak = i, 0
	}
	if b.streak++; b.streak >= biasAfter && b.fast && i < len(b.home) && b.home[i].Load() != nil {
		b.bias.Store(int32(i + 1))
	}
	return true, false
}

// tryLock makes the caller hold the big shard s if its mutex is free (shard.tryLock for it):
// the mutex and revoked, and, when the bias is another P's than the caller's, the bias
// cleared and that P's section under way ended.
func (b *bigShard) tryLock(s *shard) bool {
	i := procpin.Pin()
	if !s.mu.TryLock() {
		procpin.Unpin()
		return false
	}
	s.revoked.Add(1) // pinned to P i: no section of i's is under way, and none starts now
	v := b.bias.Load()
	procpin.Unpin()
	if v != 0 && v != int32(i+1) {
		b.bias.Store(0)
		b.last, b.streak = -1, 0
		fence.Heavy() // a section starting after this sees revoked; one under way is seen inside
		b.waitFor(v)
	}
	return true
}

// waitFor waits for the section under way on the P of bias v (0: none) to end.
func (b *bigShard) waitFor(v int32) {
	if v == 0 {
		return
	}
	waitClear(&b.home[v-1].Load().bigInside)
}

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

// inBig runs f, the heap's non-blocking work, on the big shard's fast paths: in a section when
// the caller's P has the bias, else under its mutex when that is free, no P has the bias and
// the caller's P is not backing off (finding the mutex held starts the back-off: heldBig). It
// runs pinned to the caller's P.
func (p *Pool) inBig(f func(h *heap.Heap)) {
	s := p.big.s.Load()
	if s == nil {
		return
	}
	i := procpin.Pin()
	defer procpin.Unpin()
	if hs := p.big.enter(s, i); hs != nil {
		f(s.h)
		fence.Release(&hs.bigInside, 0)
		return
	}
	if locked, held := p.big.lockFast(s, i); locked {
		f(s.h)
		s.mu.Unlock()
	} else if held {
		p.heldBig(i)
	}
}

// tryAllocBig is the big shard's fast path for a request of its sizes: the heap's non-blocking
// allocation (inBig).
func (p *Pool) tryAllocBig(n uintptr) (addr uintptr, ok bool) {
	p.inBig(func(h *heap.Heap) {
		if !p.closed.Load() { // see allocOnce
			addr, ok = h.TryAlloc(n)
		}
	})
	return addr, ok
}

// tryFreeBig is the big shard's fast path for a free of a buffer of its sizes: the heap's
// non-blocking free (TryFreeOrHeld, inBig), which keeps a freed object page for the next
// request of its size, as tryAllocBig allocates (a P backing off most likely has its buffers
// from its home shard).
func (p *Pool) tryFreeBig(addr, n uintptr) (freed, held bool) {
	p.inBig(func(h *heap.Heap) { freed, held = h.TryFreeOrHeld(addr, n) })
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

// heldBig notes, in P i's home shard (if it has one), that i found the big shard held.
func (p *Pool) heldBig(i int) {
	if i < len(p.home) {
		if hs := p.home[i].Load(); hs != nil {
			hs.skipBig.Store(bigBackoff)
		}
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
	if s := l.p.big.s.Load(); s != nil && s.tryLock() {
		return s.h
	}
	return nil
}

// EndLend lets the big shard go after a TryLend that returned its heap.
func (l bigLender) EndLend() { letGo(l.p.big.s.Load()) }
