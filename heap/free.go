package heap

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// Free gives back the block at p. A block of another heap of the group is freed the lock-free
// way, as from another goroutine. Errors (never panics): ErrNotOwned, ErrInteriorPointer,
// ErrDoubleFree; the heap is unchanged by a failed Free.
func (h *Heap) Free(p uintptr) error {
	pg, idx, err := h.g.locate(p)
	if err != nil {
		return h.closedOr(err)
	}
	return h.free(pg, idx, p, 0)
}

// FreeSized is Free that also checks n against the size the block was allocated with, so that a
// sub-slice or a truncated buffer is refused (ErrSizeMismatch) instead of freed. The check is
// part of the free's compare-and-swap (see freeState), so a stale free racing another
// goroutine's allocation of the block with a different size is refused too.
func (h *Heap) FreeSized(p, n uintptr) error {
	pg, idx, err := h.g.locate(p)
	if err != nil {
		return h.closedOr(err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %#x freed with 0 bytes", ErrSizeMismatch, p)
	}
	return h.free(pg, idx, p, n)
}

// closedOr reports a failed free of a closed heap as ErrClosed: its memory is gone, so what
// locate found (a free chunk) says nothing about the pointer.
func (h *Heap) closedOr(err error) error {
	if h.closed {
		return fmt.Errorf("%w: free after Close (%v)", ErrClosed, err)
	}
	return err
}

// free frees block idx of pg, at p, allocated with n bytes (0: any).
func (h *Heap) free(pg *page, idx uint32, p, n uintptr) error {
	if pg.heap != h {
		return pg.freeRemote(idx, p, n)
	}
	size, ok := pg.freeState(idx, false, n)
	if !ok {
		return pg.freeError(idx, size, p, n)
	}
	if pg.class < 0 {
		h.freeObject(pg)
		return nil
	}
	h.pushFree(pg, idx, size)
	if !pg.inAvail || pg.empty() && h.cur[pg.class] != pg {
		h.pageChanged(pg, true)
	}
	return nil
}

// freeRemote frees block idx of pg, at p, allocated with n bytes (0: any), from any goroutine,
// without a lock.
func (pg *page) freeRemote(idx uint32, p, n uintptr) error {
	if st, ok := pg.freeState(idx, true, n); !ok {
		return pg.freeError(idx, st, p, n)
	}
	pg.remote[idx>>6].Or(1 << (idx & 63))
	if pg.pending.Load() == 0 && pg.pending.CompareAndSwap(0, 1) {
		pg.heap.pending.push(pg)
	}
	return nil
}

// freeError says why freeState refused block idx, at p, whose state word was st: it was not
// live, or live with another size than n.
func (pg *page) freeError(idx, st uint32, p, n uintptr) error {
	if st == 0 || st&freedRemote != 0 {
		return fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	live := uintptr(st)
	if pg.class < 0 {
		live = pg.objSize
	}
	return fmt.Errorf("%w: %#x was allocated with %d bytes, freed with %d", ErrSizeMismatch, p, live, n)
}

// pushFree puts a block that is no longer live back on its page's free stack.
func (h *Heap) pushFree(pg *page, idx, size uint32) {
	pg.free[pg.nfree] = uint16(idx)
	pg.nfree++
	h.live -= uintptr(size)
	h.frees++
	pg.frees++
}

// pageChanged runs when a page gained a free block while full, or became empty: it goes back on
// its class's available list, and an empty page other than the current one is given back.
func (h *Heap) pageChanged(pg *page, mayRelease bool) {
	cl := &h.classes[pg.class]
	if !pg.inAvail {
		cl.avail.pushFront(pg)
	}
	if mayRelease && pg.empty() && h.cur[pg.class] != pg {
		cl.avail.remove(pg)
		cl.retire(pg)
		h.freeSlices(pg)
	}
}

// freeObject gives back an object or huge page whose block was freed.
func (h *Heap) freeObject(pg *page) {
	h.live -= pg.objSize
	h.frees++
	if pg.seg.kind == segHuge {
		if h.hold { // RetainSegments: huge memory goes back to the arena at once
			h.drop(pg)
			return
		}
		// Kept, like an object page, for the next huge object of about its size; its memory
		// goes to the arena's purge unless reused within the delay.
		h.idle(pg)
		h.keep(&h.bigFree, pg, maxBigFree)
		return
	}
	// Keep the page, geometry and all, for the next object of about its size: reusing it is
	// reusing a block, with no page or segment to build. Its memory goes to the arena's purge
	// unless the page is reused within the delay.
	h.idle(pg)
	h.keep(&h.objFree, pg, maxObjFree)
}

// idle hands the memory of a freed object or huge page to the arena as an idle tracked range
// (arena.Kept): it stays committed and wanted, so that reusing the page within the purge delay
// costs no arena call (see Claim in allocBig), and the arena's purge timer gives it up when it
// stays idle for the delay, or Trim does. The range is tracked at the page's first free and
// until it is dropped. A range the arena refuses to track goes to the purge at once (Decommit)
// and is committed again at reuse.
func (h *Heap) idle(pg *page) {
	size := pg.bsize // a huge object's span
	if pg.seg.kind != segHuge {
		size = uintptr(pg.nslice) << sliceShift
	}
	if !pg.tracked {
		if h.a.Track(&pg.kept, pg.base, size) != nil {
			if h.a.Decommit(pg.base, size) == nil {
				pg.seg.decommit |= sliceMask(pg.slice0, pg.nslice) // an empty mask for huge pages
				pg.want = 0
			}
			return
		}
		pg.tracked = true
	}
	h.a.Idle(&pg.kept)
}

// keep adds a freed object or huge page to a list kept for reuse, dropping the oldest when the
// list is full.
func (h *Heap) keep(list *[]*page, pg *page, limit int) {
	if len(*list) == limit {
		h.drop((*list)[0])
		*list = append((*list)[:0], (*list)[1:]...)
	}
	*list = append(*list, pg)
}

// dropAll drops every page of a kept list.
func (h *Heap) dropAll(list *[]*page) {
	for _, pg := range *list {
		h.drop(pg)
	}
	*list = (*list)[:0]
}

// drop gives a kept page up for good: it stops being tracked, a huge object's chunks go back to
// the arena, an object page's slices to its segment, whose memory freeSlices gives to the
// purge unless the arena has already.
func (h *Heap) drop(pg *page) {
	if pg.tracked {
		pg.tracked = false
		if h.a.Untrack(&pg.kept) && pg.seg.kind != segHuge {
			pg.seg.decommit |= sliceMask(pg.slice0, pg.nslice) // given up: see freeSlices
		}
	}
	if pg.seg.kind != segHuge {
		h.freeSlices(pg)
		return
	}
	pg.dead = true
	h.g.unregister(pg.seg)
	_ = h.a.Free(pg.seg.span) // cannot fail: the span is ours and in use
	h.nhuge--
}

// freeSlices returns a page's slices to its segment, and an empty segment to the spare slot or
// the arena.
func (h *Heap) freeSlices(pg *page) {
	s := pg.seg
	pg.dead = true
	for i := pg.slice0; i < pg.slice0+pg.nslice; i++ {
		s.pages[i].Store(nil)
	}
	m := sliceMask(pg.slice0, pg.nslice)
	s.free |= m
	s.npages--
	if s.npages > 0 {
		// The segment stays. A page of 512 KiB or more gives its memory to the arena's purge
		// unless a new page claims it within the delay; small pages churn too fast for that
		// to pay (it would bring commit system calls back into steady states).
		if s.kind != segSmall && s.decommit&m != m && h.a.Decommit(pg.base, uintptr(pg.nslice)<<sliceShift) == nil {
			s.decommit |= m
		}
		h.segs[s.kind].push(s)
		return
	}
	h.segs[s.kind].remove(s)
	h.g.unregister(s)
	if h.hold || len(h.spares) == 0 {
		// Kept for reuse, but its memory goes to the arena's purge unless claimed in time.
		if h.a.Decommit(s.base, segSize) == nil {
			s.decommit = ^uint64(0)
		}
		h.spares = append(h.spares, s)
		return
	}
	_ = h.a.Free(s.span)
	h.nsegs--
}

// collectPage moves pg's remote frees onto its free stack. It leaves pg.pending alone: only
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
		}
	}
	if pg.class >= 0 {
		h.pageChanged(pg, mayRelease)
	}
}

// collectPending collects every page on the pending stack and reports whether there was one.
func (h *Heap) collectPending() bool {
	pg := h.pending.takeAll()
	found := pg != nil
	for pg != nil {
		next := pg.nextPending // read before pg can be pushed again
		pg.pending.Store(0)    // before the swaps: a free that lands after them pushes pg again
		h.collectPage(pg, true)
		pg = next
	}
	return found
}

// Collect takes in the blocks other goroutines have freed, so that they can be reused and
// empty pages and segments given back. The owner calls it; allocation calls it when a class
// runs out of blocks.
func (h *Heap) Collect() {
	h.collectPending()
	h.checkInvariants("Collect")
}

// Trim gives back to the arena every empty page and segment the heap keeps for reuse (all
// held segments, with HoldSegments).
func (h *Heap) Trim() {
	h.Collect()
	h.releaseEmpty()
	h.checkInvariants("Trim")
}

// releaseEmpty gives back the empty pages kept as current pages, the kept object pages and
// huge objects, and the spare segments.
func (h *Heap) releaseEmpty() {
	for c := range h.classes {
		cl := &h.classes[c]
		if pg := h.cur[c]; pg != &cl.empty && pg.empty() {
			h.cur[c] = &cl.empty
			h.pageChanged(pg, true)
		}
	}
	h.dropAll(&h.objFree)
	h.dropAll(&h.bigFree)
	for _, s := range h.spares {
		_ = h.a.Free(s.span)
		h.nsegs--
	}
	h.spares = h.spares[:0]
}
