// Exclusive pages: the owner frees its own blocks without an atomic read-modify-write.
//
// Every free moves a block's state word out of the live states exactly once, even when frees
// of one block race (a double free from two goroutines, a free racing a Hold). Between
// goroutines that takes a compare-and-swap (freeState). But most frees are the owner's, of
// its own blocks, and there a compare-and-swap is a locked instruction that first waits for
// the allocation's stores to drain: about 6 ns, a third of a pair. So a class page starts
// exclusive: no goroutine but the owner touches its state words, and the owner frees with a
// plain load and store (freeOwn). The first other goroutine that needs one of its state words
// (a remote free, Hold, HoldSized, FreeHeld through the group) shares the page first; from
// then on the owner uses the compare-and-swap as well, until it makes the page exclusive again
// (reexclusive: after reexclusiveAfter of its frees, when no other goroutine is at work on the
// page and none has ever held one of its blocks). The owner's own holds and frees of held
// blocks (TryHoldSized, TryFreeHeld) keep an exclusive page exclusive: they are plain stores in
// the same protocol (holdExcl, freeExcl). A page given back is never reused (see the package
// invariants), so a new page starts exclusive again,
// unless remote frees have lately been a good part of the heap's (a producer/consumer pattern:
// see newMode). Object pages and huge objects are shared from the start: their frees are rare
// beside their cost.
//
// Sharing is the asymmetric Dekker pairing of internal/fence (pinned's fast sections use it):
//
//	owner, freeOwn                          sharer, share
//	store freeSeq odd (a plain store)       CAS mode exclusive → sharing
//	load mode; not exclusive: CAS path      fence.Heavy: every thread runs a full barrier
//	load the state word, check it           load freeSeq; while odd and unchanged: wait
//	store the state word (plain)            store mode = shared
//	store freeSeq even (a release store)    then the CAS on the state word
//
// Heavy orders the owner's odd store against its load of the mode, on whichever thread the
// owner runs: either the load comes after the barrier and sees the page not exclusive (that
// free takes the compare-and-swap), or the odd store came before the barrier and the sharer
// sees it, and waits for that free to end. The owner stores the state word before the even
// freeSeq, with release order, so the sharer then sees the block free, and its compare-and-swap
// fails: its free reports ErrDoubleFree, its Hold finds no live block. Every owner free that
// starts later sees the mode and uses the compare-and-swap. So of an owner free and a racing
// remote free or Hold exactly one wins, as between two compare-and-swaps:
//
//   - the owner loads the mode before the sharer's CAS: its free ends before the sharer's
//     state CAS, which sees it (it waited on freeSeq);
//   - the owner loads it after: it sees sharing or shared and takes the CAS path, which
//     orders against the sharer's;
//   - two sharers: one moves the mode to sharing and the other waits for shared, so neither
//     touches a state word before the owner's frees have drained.
//
// A sharer that finds freeSeq odd waits with runtime.Gosched: the owner's plain free is a few
// instructions that cannot block. A non-blocking path (TryFree) never shares: it refuses a
// remote free of an exclusive page, which the caller makes again on a blocking path.
//
// With the race detector, which cannot see what Heavy orders, the owner's stores of freeSeq are
// sequentially consistent atomic stores (excl_race.go): the pairing then needs no barrier, and
// the detector sees the happens-before edges the argument above rests on, so a race test
// checks the protocol itself. Where membarrier is missing, pages start shared.
//
// Readers of a state word that change nothing (Block, Size, Held, the snapshot) do not share:
// one racing a free of the block gets a stale answer either way, and the race detector reports
// that race as it would a use after free.

package heap

import (
	"fmt"
	"math/bits"
	"runtime"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// A page's mode (page.mode).
const (
	exclusive = iota // only the owner touches the state words
	sharing          // a sharer waits for the owner's plain frees to drain
	shared           // anyone, with compare-and-swaps
)

// newMode is the mode a page of class starts in (class -1: an object page or huge object).
// A class page starts shared too while other goroutines free a good part of the heap's
// blocks (modeWindow): it would be shared soon anyway, each time at the cost of a barrier.
func (h *Heap) newMode(class int16) uint32 {
	if class < 0 || !h.g.exclusive {
		return shared
	}
	if n := h.frees - h.modeFrees; n >= modeWindow {
		h.remoteMostly = (h.remoteFrees-h.modeRemote)*remoteShare >= n
		h.modeFrees, h.modeRemote = h.frees, h.remoteFrees
	}
	if h.remoteMostly {
		return shared
	}
	return exclusive
}

// newMode decides again once per modeWindow frees (the owner's and those it collected) whether
// remote frees were at least 1/remoteShare of them.
const (
	modeWindow  = 1024
	remoteShare = 8
)

// freeOwn is freeState for the owner's free of block idx of its own class page, allocated
// with n bytes (0: any) and held or not as hold says: a plain load and store while the page is
// exclusive (freeExcl), else the compare-and-swap. The owner may always take the latter: a
// compare-and-swap is ordered with a sharer's whatever the mode.
func (h *Heap) freeOwn(pg *page, idx uint32, n uintptr, hold uint32) (old uint32, ok bool) {
	if old, ok = h.freeExcl(pg, idx, stateOf(n), hold); ok {
		return old, true
	}
	return pg.freeState(idx, false, n, hold) // shared, or refused: freeState says why
}

// freeExcl is the owner's plain free of block idx of its class page pg, held or not as hold
// says and allocated with want bytes (0: any), when pg is exclusive: see above. It returns the
// size the block was allocated with; ok false, with nothing changed, when pg is not exclusive
// or the block cannot be freed.
func (h *Heap) freeExcl(pg *page, idx, want, hold uint32) (size uint32, ok bool) {
	seq := h.freeSeq + 1
	ownerStore(&h.freeSeq, seq) // odd: then the load of the mode (see above)
	if atomic.LoadUint32(&pg.mode) == exclusive {
		w := &pg.state[idx]
		if size = *w; freeable(size, want, hold) {
			*w = 0
			ok = true
		}
	}
	ownerStore(&h.freeSeq, seq+1) // even, after the state word: see above
	return size &^ held, ok
}

// holdExcl is the owner's plain hold of live block idx of its class page pg, allocated with
// want bytes, when pg is exclusive: freeExcl's protocol, with the state word's hold set where
// freeExcl clears the word, so that a buffer its owner holds (pinned's FreeAsync) keeps its
// page exclusive and is freed later with plain stores too. excl false says pg is not
// exclusive, and nothing has changed; else ok says whether the block is live and of that size
// (held now), and old is its state word before.
func (h *Heap) holdExcl(pg *page, idx, want uint32) (old uint32, ok, excl bool) {
	seq := h.freeSeq + 1
	ownerStore(&h.freeSeq, seq) // odd: then the load of the mode (see above)
	if atomic.LoadUint32(&pg.mode) == exclusive {
		excl = true
		w := &pg.state[idx]
		if old = *w; old != 0 && old&freedRemote == 0 && old&^held == want {
			*w = old | held
			ok = true
		}
	}
	ownerStore(&h.freeSeq, seq+1) // even, after the state word: see above
	return old, ok, excl
}

// enter begins a change of pg's state words by a goroutine other than its owner (a remote free,
// a hold), and shares pg unless it is shared. Unless pg stays shared for good (keepShared), it
// counts the caller in pg.sharers, so that the owner does not make the page exclusive again
// meanwhile (reexclusive), and reports so; leave(counted) ends it, once the caller is done
// with the state words and the remote bitmap. A page that stays shared costs its remote
// frees no count: two locked instructions, a third of a remote free.
func (pg *page) enter() (counted bool) {
	if counted = !pg.keepShared.Load(); counted {
		pg.sharers.Add(1) // then the load of the mode: see reexclusive
	}
	if atomic.LoadUint32(&pg.mode) != shared {
		pg.shareSlow()
	}
	return counted
}

// enterHold is enter for a hold, always counted: the page stays shared from then on (see
// reexclusive), as an exclusive page holds no block held by another goroutine.
func (pg *page) enterHold() {
	if !pg.keepShared.Load() {
		pg.keepShared.Store(true) // before the count: see reexclusive
	}
	if invariants.Enabled {
		pg.holdSeen.mark() // after keepShared: see reexclusive
	}
	pg.sharers.Add(1)
	if atomic.LoadUint32(&pg.mode) != shared {
		pg.shareSlow()
	}
}

// leave ends what enter began.
func (pg *page) leave(counted bool) {
	if counted {
		pg.sharers.Add(-1)
	}
}

// shareSlow moves an exclusive page to shared, or waits for the sharer that is doing it (or
// for the owner to give up making it exclusive again: see reexclusive).
func (pg *page) shareSlow() {
	for {
		switch atomic.LoadUint32(&pg.mode) {
		case shared:
			return
		case exclusive:
			if !atomic.CompareAndSwapUint32(&pg.mode, exclusive, sharing) {
				continue
			}
			heavy()
			h := pg.heap
			if seq := atomic.LoadUint32(&h.freeSeq); seq&1 != 0 {
				for atomic.LoadUint32(&h.freeSeq) == seq {
					runtime.Gosched()
				}
			}
			atomic.StoreUint32(&pg.mode, shared)
			return
		}
		runtime.Gosched() // sharing: another sharer is at it
	}
}

// reexclusiveAfter is how many of the owner's frees on a shared class page come between two
// tries to make it exclusive again: each success costs the next remote free of the page a
// barrier (heavy), so a page freed remotely now and then pays one barrier per this many
// frees at most, and saves a compare-and-swap on each.
const reexclusiveAfter = 4096

// reexclusiveMax is how many times reexclusive makes a page exclusive again.
const reexclusiveMax = 8

// keepSharedAfter is how many remote frees of a class page the owner collects before the page
// stays shared for good (keepShared): its remote frees then need no count.
const keepSharedAfter = 256

// reexclusive makes pg, a shared class page of the owner's, exclusive again when no other
// goroutine is at work on it and none ever held one of its blocks, so that the owner's frees
// go back to plain stores. A page is shared by its first remote free, which a goroutine that
// merely moved to another processor makes as well (pinned's shards are per P): without this,
// one such free made every later owner free of the page a compare-and-swap for its life.
//
// It pairs with enter as sequentially consistent operations: the owner moves the mode from
// shared to exclusive, then loads sharers and keepShared; a sharer adds itself to sharers (or
// finds keepShared set, which is never cleared), then loads the mode. Either the owner sees the
// sharer counted or keepShared set, and puts the mode back (a sharer that found it exclusive
// meanwhile shares it again, the usual way), or the sharer sees the mode exclusive and shares
// the page itself, waiting for the owner's plain frees. A page made exclusive again
// reexclusiveMax times stays shared (keepShared): each time costs the next remote free a
// barrier, and remote frees that keep coming back are better paid with compare-and-swaps;
// so does a page of which the owner has collected keepSharedAfter remote frees (collectPage),
// and one shared from the start (newMode's remoteMostly). A sharer counted
// is done with the page when the owner sees sharers at zero: its state word and its remote bit
// are written, and the owner collects the bit here, so that the page is exclusive as a new one
// is: no remote bit set, no state word freed remotely (a block collected has a free-list word
// from then on) and none held by another goroutine (a hold
// through the group, or the owner's on a shared page, sets keepShared first; the owner's plain
// holds of an exclusive page, holdExcl, may stay, as on any exclusive page). That a page once
// held is never made exclusive again is history, which the state cannot show (keepShared is
// set for other reasons too); the invariants build records it (holdSeen) and checks it here.
func (h *Heap) reexclusive(pg *page) {
	pg.calm = 0
	// The invariants build checks the rule against its record of holds (holdSeen), read before
	// keepShared: a hold marks it after setting keepShared, so a mark seen here is a keepShared
	// the loads below see, unless a hold path failed to set it.
	wasHeld := invariants.Enabled && pg.holdSeen.seen()
	if h.remoteMostly || pg.keepShared.Load() || pg.sharers.Load() != 0 || !atomic.CompareAndSwapUint32(&pg.mode, shared, exclusive) {
		return
	}
	if pg.sharers.Load() != 0 || pg.keepShared.Load() {
		// Fails only where a sharer has begun sharing it again: it ends that.
		atomic.CompareAndSwapUint32(&pg.mode, exclusive, shared)
		return
	}
	if wasHeld {
		panic(fmt.Sprintf("heap: page %#x, a block of which was held, became exclusive again",
			pg.base))
	}
	if pg.reexcl++; pg.reexcl == reexclusiveMax {
		pg.keepShared.Store(true) // the last time (see above)
	}
	for w := range pg.remote {
		if pg.remote[w].Load() == 0 {
			continue
		}
		for b := pg.remote[w].Swap(0); b != 0; b &= b - 1 {
			idx := uint32(w*64 + bits.TrailingZeros64(b))
			h.pushFree(pg, idx, atomic.LoadUint32(&pg.state[idx])&^freedRemote)
			h.remoteFrees++
			pg.remoteSeen++
		}
	}
}
