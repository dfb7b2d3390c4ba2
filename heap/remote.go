// Remote frees: the lock-free way any goroutine gives back a block of a heap it does not own,
// and the owner's collection of them (mimalloc's thread_free, with bits instead of links).
//
// A remote free shares the block's page if it is exclusive (exclusive.go), moves the block's
// state word out of the live states with one compare-and-swap (see freeState: of racing frees
// exactly one wins), sets the block's bit in its page's remote
// bitmap with one atomic OR and, the first time since the page was last collected, pushes the
// page onto its owner's lock-free pending stack. The owner takes the whole stack at once
// (so the stack has no ABA problem) when a class runs out of blocks, at Collect, Trim, Stats
// and Close, and moves each set bit's block onto its page's free list.
//
// Invariants: a live page is on the pending stack, once, exactly while page.pending is set, and
// is while a bit of its remote bitmap is set; a block's remote bit is set only while its state
// word says freedRemote and held clear and it is on no free list; a page is given back only
// when it holds no uncollected remote free (see pushFree and the package invariants), so no
// remote free lands on a page given back, and a stale pending entry for a dead page is ignored.

package heap

import (
	"math/bits"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// freeRemote frees block idx of pg, at p, allocated with n bytes (0: any), held or not as hold
// says, from any goroutine, without a lock.
func (pg *page) freeRemote(idx uint32, p, n uintptr, hold uint32) error {
	if !invariants.Enabled {
		return pg.freeRemoteNow(idx, p, n, hold)
	}
	g := pg.heap.g
	g.foreignBegun.Add(1) // see checkInvariants
	err := pg.freeRemoteNow(idx, p, n, hold)
	g.foreignEnded.Add(1)
	return err
}

// freeRemoteNow is freeRemote.
func (pg *page) freeRemoteNow(idx uint32, p, n uintptr, hold uint32) error {
	counted := pg.enter()
	st, ok := pg.freeState(idx, true, n, hold)
	if ok {
		pg.remoteFreed(idx)
	}
	pg.leave(counted)
	if !ok {
		return pg.freeError(idx, st, p, n, hold)
	}
	return nil
}

// remoteFreed hands block idx, whose state word a remote free has moved out of the live
// states, to the owner: its bit in the remote bitmap, and the page on the pending stack.
func (pg *page) remoteFreed(idx uint32) {
	pg.remote[idx>>6].Or(1 << (idx & 63))
	if pg.pending.Load() == 0 && pg.pending.CompareAndSwap(0, 1) {
		pg.heap.pending.push(pg)
	}
}

// atomicWord is a word of a page's remote-free bitmap.
type atomicWord = atomic.Uint64

// pendingStack is a lock-free stack of pages with remote frees: many pushers, one owner that
// takes the whole stack at once (so the stack has no ABA problem).
type pendingStack struct{ head atomic.Pointer[page] }

func (s *pendingStack) push(p *page) {
	for {
		old := s.head.Load()
		p.nextPending = old
		if s.head.CompareAndSwap(old, p) {
			return
		}
	}
}

func (s *pendingStack) takeAll() *page { return s.head.Swap(nil) }

// collectPage moves pg's remote frees onto its free list. It leaves pg.pending alone: only
// collectPending, which has taken pg off the pending stack, may clear it (clearing it while pg
// is still on the stack would let a remote free push pg twice).
//
// A page released already may still be on the pending stack: a remote free that lands between
// collectPending's clearing of pg.pending and its swap of the bits pushes pg again, yet its bit
// is taken by that same collection, which may then release pg. Such a stale entry is ignored.
func (h *Heap) collectPage(pg *page, mayRelease bool) {
	if pg.dead {
		return
	}
	for w := range pg.remote {
		if pg.remote[w].Load() == 0 {
			continue
		}
		for b := pg.remote[w].Swap(0); b != 0; b &= b - 1 {
			if pg.class < 0 {
				h.freeObject(pg)
				return
			}
			idx := uint32(w*64 + bits.TrailingZeros64(b))
			h.pushFree(pg, idx, atomic.LoadUint32(&pg.state[idx])&^freedRemote)
			h.remoteFrees++
			pg.remoteSeen++
		}
	}
	if pg.remoteSeen >= keepSharedAfter && !pg.keepShared.Load() {
		pg.keepShared.Store(true) // freed remotely for good: see reexclusive
	}
	if pg.class >= 0 {
		h.pageChanged(pg, mayRelease)
	}
}

// collectPending collects every page on the pending stack and reports whether there was one.
//
// On a non-blocking path it leaves object pages and huge objects on the stack, pending: their
// free calls the arena.
func (h *Heap) collectPending() bool {
	pg := h.pending.takeAll()
	found := pg != nil
	var later *page
	for pg != nil {
		next := pg.nextPending // read before pg can be pushed again
		if h.noBlock && pg.class < 0 && !pg.dead {
			pg.nextPending, later = later, pg
			pg = next
			continue
		}
		pg.pending.Store(0) // before the swaps: a free that lands after them pushes pg again
		h.collectPage(pg, true)
		pg = next
	}
	for later != nil {
		next := later.nextPending
		h.pending.push(later) // still marked pending, so no remote free pushes it meanwhile
		later = next
	}
	return found
}

// Collect takes in the blocks other goroutines have freed, so that they can be reused and
// empty pages and segments given back. The owner calls it; allocation calls it when a class
// runs out of blocks.
func (h *Heap) Collect() {
	h.collectPending()
	h.releaseDeferred()
	h.checkInvariants("Collect")
}
