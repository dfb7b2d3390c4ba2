// The owner's free paths: Free and FreeSized find the block (group.go), hand a block of another
// heap to the remote path (remote.go), and put their own back on its page's free list, giving
// back a page that empties; Trim and Close give back what the heap keeps.

package heap

import (
	"fmt"
	"sync/atomic"
)

// Free gives back the block at p. A block of another heap of the group is freed the lock-free
// way, as from another goroutine. Errors (never panics): ErrNotOwned, ErrInteriorPointer,
// ErrDoubleFree; the heap is unchanged by a failed Free.
func (h *Heap) Free(p uintptr) error { return h.freeAt(p, 0, freeAny) }

// FreeSized is Free that also checks n against the size the block was allocated with, so that a
// sub-slice or a truncated buffer is refused (ErrSizeMismatch) instead of freed. The check is
// part of the free's compare-and-swap, so a stale free racing another
// goroutine's allocation of the block with a different size is refused too.
func (h *Heap) FreeSized(p, n uintptr) error { return h.freeAt(p, n, freeSized) }

// How freeAt frees: Free, FreeSized or TryFree.
const (
	freeAny = iota
	freeSized
	freeTry
)

// freeAt is Free, FreeSized and TryFree (how says which; n is 0 for Free). Its fast path, first
// and written out, is the owner's free of a block of one of its class pages found in near
// (near.go), with a plain store on an exclusive page (exclusive.go) or the compare-and-swap on
// a shared one; the rest goes to freeSlow. One function for the three, so that each is a
// single call.
func (h *Heap) freeAt(p, n uintptr, how uint8) error {
	if pg, idx, ok := h.nearBlock(p); ok && (n != 0 || how == freeAny) {
		var size uint32
		linked := false // the exclusive path writes the block's free-list word itself
		seq := h.freeSeq + 1
		ownerStore(&h.freeSeq, seq) // odd: then the load of the mode (see exclusive.go)
		if atomic.LoadUint32(&pg.mode) == exclusive {
			w := &pg.state[idx]
			if size, ok = *w, freeable(*w, stateOf(n), 0); ok {
				*w, linked = freeLink|pg.head, true // pushFree's word, in the window
			}
			ownerStore(&h.freeSeq, seq+1) // even, after the state word
			if !ok && how == freeTry && heldSized(size, n) {
				return errHeldBlock // held by the owner (holdExcl): the page stays exclusive
			}
		} else {
			ownerStore(&h.freeSeq, seq+1)
			if size, ok = pg.freeState(idx, false, n, 0); !ok && how == freeTry && heldSized(size, n) {
				return errHeldBlock
			}
			if pg.calm++; ok && pg.calm >= reexclusiveAfter {
				h.reexclusive(pg)
			}
		}
		if ok {
			if !linked {
				ownerStore(&pg.state[idx], freeLink|pg.head)
			}
			h.linked(pg, idx, size)
			if pg.nfree >= pg.alert { // off the list, or empty and not current: see watch
				h.noBlock = how == freeTry
				h.pageChanged(pg, true)
				h.noBlock = false
			}
			return nil
		}
	}
	if how == freeTry {
		return h.tryFreeSlow(p, n)
	}
	return h.freeSlow(p, n, how, 0)
}

// freeSlow is Free and FreeSized (and FreeHeld: hold is held) where freeAt's fast path does not
// serve (a block near does not have, another heap's, an object or huge page, a held one) or
// refuses (it then says why).
func (h *Heap) freeSlow(p, n uintptr, how uint8, hold uint32) error {
	pg, idx, ok := h.g.find(p) // not locate: a call less
	if !ok {
		return h.closedOr(h.g.whyNot(p))
	}
	if pg.class >= 0 && pg.heap == h {
		h.remember(p, pg)
	}
	if n == 0 && how != freeAny {
		return fmt.Errorf("%w: %#x freed with 0 bytes", ErrSizeMismatch, p)
	}
	return h.free(pg, idx, p, n, hold)
}

// closedOr reports a failed free of a closed heap as ErrClosed: its memory is gone, so what
// locate found (a free chunk) says nothing about the pointer.
func (h *Heap) closedOr(err error) error {
	if h.closed {
		return fmt.Errorf("%w: free after Close (%v)", ErrClosed, err)
	}
	return err
}

// free frees block idx of pg, at p, allocated with n bytes (0: any), held or not as hold says
// (see freeState).
func (h *Heap) free(pg *page, idx uint32, p, n uintptr, hold uint32) error {
	if pg.heap != h {
		return pg.freeRemote(idx, p, n, hold)
	}
	if pg.class < 0 { // shared from the start: see exclusive.go
		if size, ok := pg.freeState(idx, false, n, hold); !ok {
			return pg.freeError(idx, size, p, n, hold)
		}
		h.freeObject(pg)
		return nil
	}
	size, ok := h.freeOwn(pg, idx, n, hold)
	if !ok {
		return pg.freeError(idx, size, p, n, hold)
	}
	h.freed(pg, idx, size)
	return nil
}

// freed takes back block idx of class page pg, whose state word the owner's free has moved out
// of the live states (it was size bytes).
func (h *Heap) freed(pg *page, idx, size uint32) {
	h.pushFree(pg, idx, size)
	if pg.nfree >= pg.alert { // see watch
		h.pageChanged(pg, true)
	}
}

// freeError says why freeState refused block idx, at p, whose state word was st: it was not
// live, held (or not held, for FreeHeld), or live with another size than n.
func (pg *page) freeError(idx, st uint32, p, n uintptr, hold uint32) error {
	switch {
	case st == 0 || st&freedRemote != 0:
		return fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	case st&held != hold && hold == 0:
		return fmt.Errorf("%w: %#x", ErrHeld, p)
	case st&held != hold:
		return fmt.Errorf("%w: FreeHeld of %#x, which is not held", ErrInvalidArgument, p)
	}
	live := uintptr(st &^ held)
	if pg.class < 0 {
		live = pg.objSize.Load()
	}
	return fmt.Errorf("%w: %#x was allocated with %d bytes, freed with %d", ErrSizeMismatch, p, live, n)
}

// pushFree puts block idx of pg, no longer live, at the head of its page's free list (see
// freeLink). The word is stored as freeExcl's are (ownerStore): other goroutines may load it
// at the same time, a stale free finding it free.
func (h *Heap) pushFree(pg *page, idx, size uint32) {
	ownerStore(&pg.state[idx], freeLink|pg.head)
	h.linked(pg, idx, size)
}

// linked is pushFree once block idx's word links to the head: idx is the head now.
func (h *Heap) linked(pg *page, idx, size uint32) {
	pg.head = idx
	pg.nfree++
	h.live -= uintptr(size)
	h.frees++
	pg.frees++
}

// pageChanged runs when a page gained a free block while full, or became empty: it goes back on
// its class's available list, and an empty page other than the current one is given back (or,
// on a non-blocking path, left for the next blocking one), but for a small class's spare.
//
// The spare: a small class (64 KiB pages) keeps one empty page on its available list rather
// than giving it back, for its next page. A producer/consumer flow empties pages by remote
// frees as fast as the owner fills new ones, and gave back and made a page every 18
// allocations or so (a page costs Go allocations for its tables and arena work for its
// slices); mimalloc keeps such a page a while too (page retire). It is one page a class, 64
// KiB, given back by Trim and Close.
func (h *Heap) pageChanged(pg *page, mayRelease bool) {
	cl := &h.classes[pg.class]
	if !pg.avail.Linked() {
		// At the back: the pages ahead of it have gathered frees longer, so the class's next
		// current page (allocSlow takes the first with a block) has more than this one's one
		// or two, and a churn over many pages does not change pages at every allocation
		// (mimalloc queues a page that stops being full at the end too).
		cl.avail.PushBack(pg, &pg.avail)
		h.watch(pg)
	}
	if mayRelease && pg.empty() && h.cur[pg.class] != pg {
		if cl.spare == pg || cl.spare == nil && cl.kind == segSmall {
			cl.spare = pg
			return
		}
		if h.noBlock { // freeSlices may call the arena: see try.go
			h.deferred = true
			return
		}
		h.release(pg)
	}
}

// release gives back an empty class page other than its class's current one.
func (h *Heap) release(pg *page) {
	cl := &h.classes[pg.class]
	if cl.spare == pg {
		cl.spare = nil
	}
	cl.avail.Remove(&pg.avail)
	cl.retire(pg)
	h.freeSlices(pg)
}

// Trim gives back to the arena every empty page and segment the heap keeps for reuse (all
// held segments, with RetainSegments) and the memory of its free blocks (where the arena's
// granule allows: see PurgeIdle), so that what stays committed is what its live blocks
// touch. The arena decommits it after the purge delay, or at once at its own Trim.
func (h *Heap) Trim() {
	h.Collect()
	h.releaseEmpty()
	for c := range h.classes {
		for _, pg := range h.classes[c].all {
			h.purgePage(pg, false)
			pg.seenOps, pg.settled = pg.allocs()+pg.frees, true
		}
	}
	h.purgeSlices(false)
	h.checkInvariants("Trim")
}

// releaseEmpty gives back the empty pages kept as current pages or spares, the kept object
// pages and huge objects, and the spare segments.
func (h *Heap) releaseEmpty() {
	for c := range h.classes {
		cl := &h.classes[c]
		if pg := h.cur[c]; pg != &cl.empty && pg.empty() {
			h.setCur(uint8(c), &cl.empty)
			h.pageChanged(pg, true) // given back, or kept as the spare and given back below
		}
		if cl.spare != nil {
			h.release(cl.spare)
		}
	}
	h.deferred = true // and every other empty page of the available lists
	h.releaseDeferred()
	h.takeBackReturned()
	h.dropAll(&h.objFree)
	h.dropAll(&h.bigFree)
	for _, r := range h.runs { // a held heap's empty segments of runs in use (pack.go)
		for _, s := range r.segs {
			if s.npages == 0 && s.decommit != ^uint64(0) && h.a.Decommit(s.base, segSize) == nil {
				s.decommit = ^uint64(0)
			}
		}
	}
	h.releaseRuns(0)
	h.trimRuns()
	for _, s := range h.spares {
		_ = h.a.Free(s.span)
		h.nsegs--
	}
	h.spares = h.spares[:0]
}
