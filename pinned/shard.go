package pinned

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/fence"
	"github.com/pinmalloc/pinmalloc/internal/procpin"
)

// Shards and their owners.
//
// A heap has one owner at a time (package heap). The pool keeps a home shard per P, made the
// first time a goroutine allocates there, and spill shards for what home shards cannot take.
// A shard has two kinds of owner:
//
//   - A fast section: a goroutine pinned to P i (procpin.Pin) that has set home shard i's
//     inside flag and found revoked zero. Only goroutines pinned to P i enter shard i this way,
//     and a pinned goroutine is not preempted, so fast sections of one shard never overlap and
//     need no lock. They run only the heap's non-blocking entry points (TryAlloc, TryFree), so
//     nothing in them can wait: the runtime cannot stop the world, or run another goroutine on
//     the P, until they end.
//   - A holder, outside fast sections: it holds the shard's mutex and counts itself in revoked,
//     so that no fast section starts, and it has seen every fast section under way end. A
//     goroutine pinned to P i gets that for shard i with a TryLock (own, tryOwn): no fast
//     section of shard i can be under way while it runs on P i. Any other goroutine (hold:
//     Close, Stats, Trim, the observers) raises revoked, calls fence.Heavy so that a fast
//     section either sees revoked or is seen inside, and waits for inside to clear. Holders
//     run the blocking paths: new pages and segments, object pages, huge objects, aligned
//     requests, collection and statistics.
//
// A goroutine on a blocking path whose home shard is held waits a while for it (ownSlow says
// why); if it is held still, or the goroutine's P has no home slot (GOMAXPROCS raised after
// New), it takes a spill shard: a heap that only holders own, by its mutex, made as needed up
// to the number of home slots. Where memory is coarse, one more heap, the big shard, takes the
// requests that need a page of their own when it is free: its holders, and fast sections of
// one P at a time, the P it is biased to (bigshard.go). Frees need no owner at all for blocks
// of another shard (the heap's remote free); a fast section frees its own shard's class blocks
// locally.
//
// Without fast sections (the race detector cannot see their ordering; the pinmalloc_noprocpin
// build cannot pin; a kernel without membarrier; a pool with fewer home slots than Ps) every
// owner is a holder, and a P's home slot is its number modulo the table.
//
// Invariants: inside is written only by goroutines pinned to the shard's P, and is 1 only
// within a fast section; revoked counts the holders and the holds under way; a holder has
// revoked > 0 and the mutex, and either took them pinned to the shard's P or saw inside == 0
// after a barrier that followed its revocation.

// fastPaths reports whether fast sections can be used: P numbers are exact and Heavy works. A
// pool uses them (Pool.fast) when it also has a home slot for every P.
func fastPaths() bool { return procpin.Exact && fence.Available() }

// shard is one heap and what makes a goroutine its owner. It is padded so that two shards
// never share a cache line (shardPad).
type shard struct {
	inside  uint32       // a fast section runs (plain stores, by goroutines pinned to the P)
	revoked atomic.Int32 // holders, and holds under way: no fast section may start
	slot    int          // the P it is home to; slotSpill for a spill shard and the big shard
	mu      sync.Mutex   // held by a holder
	h       *heap.Heap

	// pend is FreeAsync's cache of buffers freed on the stream of pendL and not yet on its
	// list (pend.go), written by the shard's owners only; nil in pools with no stream order.
	pend  []deferred
	pendL *streamList

	// The idle purge (purge.go): a slow path ran on the shard since the purger's last tick;
	// the purger asks its next holder to look (heap.Heap.PurgeIdle) rather than hold it; and
	// the heap's operations at that tick (the purger's alone).
	slow, look atomic.Bool
	seenOps    uint64

	// skipBig counts the requests of the big shard's sizes that the P of this home shard sends
	// here without asking the big shard (bigshard.go), after it found the big shard held.
	skipBig atomic.Uint32
	// bigInside is inside for the big shard's fast sections on this home shard's P (plain
	// stores, by goroutines pinned to the P); big is the pool's big shard, on the big shard.
	bigInside uint32
	big       *bigShard
	_         [shardPad]byte
}

// shardPad makes a shard 128 bytes, two cache lines, so that Go's allocator puts shards 128
// bytes apart (its size class of 128) and two shards never share a line: one P's fast
// sections write their shard's inside while another's read theirs. At 112 bytes, shards side
// by side in a span shared one. TestShardSize holds it.
const shardPad = 32

// homeSlot is P i's home shard, and its heap beside it: a fast section loads both from the
// slot at once, where the heap was one more dependent load behind the shard (issue 29).
type homeSlot struct {
	s atomic.Pointer[shard]
	h *heap.Heap // s's heap, written before s is stored
}

// Load returns the slot's shard, nil until made.
func (hs *homeSlot) Load() *shard { return hs.s.Load() }

// enteredHeap is entered that also returns the shard's heap (nil with a nil shard).
func (p *Pool) enteredHeap(i int) (*shard, *heap.Heap) {
	if i < len(p.home) {
		hs := &p.home[i]
		if s := hs.s.Load(); s != nil {
			s.inside = 1 // then the load below: see fence
			if s.revoked.Load() == 0 {
				return s, hs.h
			}
			s.inside = 0
		}
	}
	return nil, nil
}

// entered starts a fast section on home shard i, the caller's P's, and returns it; nil when
// there is no shard i or it is held. The caller checks p.fast first, and writes the section
// out (a helper that pinned too would be a call, a nanosecond of a 28 ns pair):
//
//	if s := p.entered(procpin.Pin()); s == nil { procpin.Unpin() } else { ...; p.exit(s) }
func (p *Pool) entered(i int) *shard {
	if i < len(p.home) {
		if s := p.home[i].Load(); s != nil {
			s.inside = 1 // then the load below: see fence
			if s.revoked.Load() == 0 {
				return s
			}
			s.inside = 0
		}
	}
	return nil
}

// exit ends a fast section and unpins.
func (p *Pool) exit(s *shard) {
	fence.Release(&s.inside, 0) // every write of the section is visible to who sees it 0
	procpin.Unpin()
}

// own returns a shard held by the caller, for a blocking path: its P's home shard when that is
// free, or soon free, else a spill shard. Give it back with letGo.
func (p *Pool) own() *shard {
	i := p.homeSlot(procpin.Pin())
	if i >= 0 {
		// Pinned to P i, so no fast section of shard i is under way, and none starts once
		// tryLock has raised revoked.
		if s := p.home[i].Load(); s != nil && s.tryLock() {
			procpin.Unpin()
			return s
		}
	}
	procpin.Unpin()
	return p.ownSlow(i)
}

// tryLock makes the caller hold s if its mutex is free, for a caller that knows no fast
// section is under way on s (or can be: a spill shard, a pool without fast sections).
func (s *shard) tryLock() bool {
	if s.big != nil {
		return s.big.tryLock(s) // its sections: see bigshard.go
	}
	if !s.mu.TryLock() {
		return false
	}
	s.revoked.Add(1)
	return true
}

// homeSlot is the home slot of P i: i itself; for a P numbered beyond the table, none (-1)
// when fast sections run (slot i is P i's alone), else the number modulo the table.
func (p *Pool) homeSlot(i int) int {
	switch {
	case i < len(p.home):
		return i
	case p.fast:
		return -1
	}
	return i % len(p.home)
}

// tryOwn makes the caller hold s if it can without waiting: a spill shard (or any shard without
// fast paths) whose mutex is free, or a home shard when the caller runs on its P.
func (p *Pool) tryOwn(s *shard) bool {
	if !p.fast || s.slot < 0 {
		return s.tryLock()
	}
	ok := procpin.Pin() == s.slot && s.tryLock()
	procpin.Unpin()
	return ok
}

// ownSlow runs when P i's home shard is busy or missing (i is -1 for a P without a slot). It
// makes the home shard in the second case. Otherwise, in a pool without fast sections it takes
// any idle shard, and waits for P i's only when every shard is busy; in a pool with them it
// waits a while for P i's (waitHome), then, as a P without a slot does at once, takes an idle
// spill shard, makes one while there are fewer than home slots, and waits for one only then.
//
// Why wait first: the holder of a busy home shard is most often a goroutine of the same P on a
// blocking path that the scheduler took off its CPU, as it cannot take a fast section. Taking
// a spill shard at once kept the P busy with the other goroutines, and every buffer they took
// meanwhile stayed in the spill shard's pages for its life, while their home shard kept the
// pages they had left. Yielding the P instead lets a preempted holder run again: larson at
// high occupancy on 2 Ps (8 goroutines of 5000 buffers, issue 38) held a median 1.27 times its
// live bytes at idle, 1.18 waiting up to homeWait, 1.17 waiting for good (15 alternated runs
// each; docs/bench.md). Why not for good: a holder in a long system call (an mlock of a large
// buffer) then stopped every other goroutine of its P, at the P's next Alloc that missed its
// fast section: one goroutine's small Allocs beside another's 256 MiB locked ones on one P
// made 88,000 - 102,000 in 2 s, p99.99 78 - 89 ms, against 240,000 - 1,000,000 and 23 µs - 27
// ms taking a spill shard at once; waiting up to 200 µs, 330,000 - 840,000 and 21 µs - 21 ms.
func (p *Pool) ownSlow(i int) *shard {
	if i >= 0 {
		s := p.home[i].Load()
		if s == nil {
			if s, _ = p.newShard(i); s != nil {
				return s
			}
			s = p.home[i].Load() // made by another goroutine meanwhile; nil: the pool is closed
		}
		if s != nil && p.fast && p.waitHome(s, i) {
			return s
		}
	}
	if !p.fast {
		ss := *p.shards.Load()
		for k := range ss {
			if s := ss[(i+k)%len(ss)]; s.tryLock() {
				return s
			}
		}
		s := p.home[i].Load()
		if s == nil {
			s = ss[0] // New made one; newShard fails only after Close
		}
		p.hold([]*shard{s})
		return s
	}
	sp := *p.spill.Load()
	start := max(i, 0)
	for k := range sp {
		if s := sp[(start+k)%len(sp)]; s.tryLock() {
			return s
		}
	}
	if s, _ := p.newShard(slotSpill); s != nil {
		return s
	}
	if len(sp) == 0 { // none made: the pool is closed
		sp = *p.shards.Load()
	}
	s := sp[start%len(sp)]
	p.hold([]*shard{s})
	return s
}

// waitHome makes the caller hold s, P i's home shard, when its mutex comes free within
// homeWait, yielding the P meanwhile, and reports whether it did. The fast sections of P i go
// on while it waits: it revokes them once the mutex is its, pinned to P i as own does when it
// runs there again (no barrier), else as hold does.
func (p *Pool) waitHome(s *shard, i int) bool {
	deadline := time.Now().Add(homeWait)
	for !s.mu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		runtime.Gosched() // a preempted holder waits in the global run queue: let it run
	}
	if procpin.Pin() == i {
		s.revoked.Add(1) // no fast section of s is under way while the caller runs on P i
		procpin.Unpin()
		return true
	}
	procpin.Unpin()
	p.revoke([]*shard{s})
	s.waitOut()
	return true
}

// homeWait is how long a blocking path waits for its P's busy home shard before it takes a
// spill shard (ownSlow): long enough for a preempted holder to run again, short beside a
// holder's commit of a large buffer (an mlock of 256 MiB takes tens of milliseconds). A
// variable for the tests.
var homeWait = 200 * time.Microsecond

// Slots of shards that are no P's home: a spill shard, and the big shard (bigshard.go).
const (
	slotSpill = -1
	slotBig   = -2
)

// newShard makes a shard, home to P slot, a spill shard (slotSpill) or the big shard
// (slotBig), and returns it held; nil when P slot's, or the big shard, was made first by
// another goroutine, or when there are as many spill shards as home slots. It makes none after
// Close, which takes growMu before it looks at the shards, so that every shard is in the
// snapshot it counts and closes.
func (p *Pool) newShard(slot int) (*shard, error) {
	p.growMu.Lock()
	defer p.growMu.Unlock()
	if p.closed.Load() {
		return nil, ErrClosed
	}
	switch {
	case slot >= 0 && p.home[slot].Load() != nil,
		slot == slotBig && p.big.s.Load() != nil,
		slot == slotSpill && len(*p.spill.Load()) >= len(p.home):
		return nil, nil
	}
	h, err := p.g.NewHeap(heap.Options{Align: p.align})
	if err != nil {
		return nil, err
	}
	s := &shard{h: h, slot: slot}
	if slot == slotBig { // before any goroutine can see s (the purger's tryLock reads both)
		s.slot = slotSpill // tryOwn: tryLock, which sees to its sections
		s.big = &p.big
	}
	if slot != slotBig && p.big.min != 0 {
		h.SetLender(bigLender{p}) // see bigshard.go
	}
	if p.order != nil && p.fast {
		s.pend = make([]deferred, 0, pendMax)
	}
	s.mu.Lock()
	s.revoked.Store(1) // held before anyone can see it
	ss := append(append([]*shard(nil), *p.shards.Load()...), s)
	p.shards.Store(&ss)
	switch slot {
	case slotBig:
		p.big.s.Store(s)
	case slotSpill:
		sp := append(append([]*shard(nil), *p.spill.Load()...), s)
		p.spill.Store(&sp)
	default:
		p.home[slot].h = h
		p.home[slot].s.Store(s)
	}
	return s, nil
}

// revoke raises revoked on every shard of ss: no fast section starts on them from then on, and
// one under way is seen inside by take (fence.Heavy orders the two).
func (p *Pool) revoke(ss []*shard) {
	for _, s := range ss {
		s.revoked.Add(1)
	}
	if p.fast {
		fence.Heavy()
	}
}

// take completes a hold of s, revoked already: its mutex, and the end of the fast section under
// way.
func (s *shard) take() {
	s.mu.Lock()
	s.waitOut()
}

// waitOut waits for the fast section under way on s, revoked already, to end: it is short,
// and takes no lock, so a holder may wait for it whatever locks it holds.
func (s *shard) waitOut() {
	waitClear(&s.inside)
	if s.big != nil {
		s.big.waitFor(s.big.bias.Load()) // the bias changes only under the mutex: see bigshard.go
	}
}

// waitClear waits for a fast section's flag to clear.
func waitClear(flag *uint32) {
	for atomic.LoadUint32(flag) != 0 {
		runtime.Gosched()
	}
}

// tryHold is hold of one shard without waiting for its mutex (a caller holding other locks
// may not: see freeLarge). It waits only for the fast section under way.
func (p *Pool) tryHold(s *shard) bool {
	p.revoke([]*shard{s})
	if !s.mu.TryLock() {
		s.revoked.Add(-1)
		return false
	}
	s.waitOut()
	return true
}

// hold makes the caller hold every shard of ss, waiting as long as it takes.
func (p *Pool) hold(ss []*shard) {
	p.revoke(ss)
	for _, s := range ss {
		s.take()
	}
}

// letGo gives back a shard the caller holds.
func letGo(s *shard) {
	s.mu.Unlock()
	s.revoked.Add(-1)
}

// each runs f on every shard in turn, as its holder. A shard's fast sections stop until f has
// run on it.
func (p *Pool) each(f func(*heap.Heap)) { p.eachOf(*p.shards.Load(), f) }

// eachOf is each over the shards ss, in their order.
func (p *Pool) eachOf(ss []*shard, f func(*heap.Heap)) {
	p.revoke(ss)
	for _, s := range ss {
		s.take()
		f(s.h)
		letGo(s)
	}
}
