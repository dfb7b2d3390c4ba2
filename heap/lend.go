// Lending: class pages of several heaps in one heap's runs.
//
// Where memory commits a chunk at a time (pack.go), what a heap costs is the chunks its pages
// touch, and each heap of a group packs its pages into runs of its own. A front with several
// heaps (package pinned's shards) then holds, for the small buffers of each heap, partly used
// chunks of its own: on the serving trace two home shards held three chunks each for under
// 2 MiB of live buffers, where one heap's pages would fit in three (issue 38). So a heap may
// borrow: SetLender names a heap of the same group, the lender, whose runs take its new class
// pages whenever the lender's owner is free. The page is the borrower's in every other way
// (its blocks, frees, purge and statistics); its slices, their commit and their chunk stay the
// lender's, as do the runs' placement and purge, so every segment keeps one owner and no
// segment field is written by two heaps. mimalloc's segments, by contrast, move whole between
// threads (abandoned and reclaimed); a page here moves to no one: it is lent for its life.
//
//  1. Borrow (newClassPage): the borrower, its own owner, asks its RoomLender for the lender's
//     heap, which it gets only when that needs no wait (a TryLock). As the lender's owner for
//     the moment it takes back what was returned (4), finds room in the lender's runs as for a
//     page of the lender's own, and commits the whole page there (a chunk's commit covers it:
//     coarse memory has nothing finer), so that the borrower never touches the segment after.
//     When the lender is busy, closed, or has no room, the page comes from the borrower's
//     own runs as before: a borrow never waits and never fails an allocation.
//  2. Use: blocks, remote frees and holds go through the page's heap, the borrower.
//  3. Return (freeSlices, when the borrower gives the empty page up): the page is dead to the
//     borrower. Its slices go back to the lender at once when the lender is free, else onto the
//     lender's returned list, a lock-free stack the lender empties at its next blocking call
//     (a page placed in its runs, Trim, PurgeIdle, Close).
//  4. Take back: the lender vacates the slices (vacate), as for a page of its own, and an
//     emptied segment's chunk goes to the purge.
//
// Invariants: a segment of a run belongs to the run's owner (run.owner), whose owner alone
// writes its fields; a borrowed page's slices are committed whole from its making to its
// return (ctop and limit at their ends); a returned page is dead, and stays in its lender's
// slice tables until taken back, where a stale lookup finds it free.

package heap

// RoomLender gives a borrowing heap the heap that lends it room: see SetLender.
type RoomLender interface {
	// TryLend returns the lending heap when the caller may act as its owner now without
	// waiting (its owner's lock was free, and is now the caller's), or nil.
	TryLend() *Heap
	// EndLend ends the ownership a non-nil TryLend gave.
	EndLend()
}

// SetLender makes h take the room for its new class pages from the runs of the heap l lends,
// whenever l lends it without waiting, so that the small buffers of several heaps share
// chunks where memory commits a chunk at a time. The lender must be a heap of the same group
// that keeps nothing (no RetainSegments); close it after h: its Close fails with ErrLent,
// releasing nothing, while h holds pages in its runs (closed, it could not take back the room
// h gives back while another goroutine holds it, and the arena would refuse to close while
// those chunks are out). It applies only where the group is coarse (Group.Coarse); elsewhere, and
// for a nil l, h keeps to its own segments. h's owner calls it; the pages h borrowed before a
// change stay with their lender.
func (h *Heap) SetLender(l RoomLender) {
	if l != nil && (!h.packed || h.hold) {
		l = nil // fine-grained memory: its own pages cost what they hold
	}
	h.lender = l
}

// borrowPage carves a class page of k slices for class c in the lender's runs, committed
// whole; nil when h has no lender, or it is busy, closed, another group's or out of room.
func (h *Heap) borrowPage(kind segKind, k int, c uint8) *page {
	if h.lender == nil {
		return nil
	}
	b := h.lender.TryLend()
	if b == nil {
		return nil
	}
	defer h.lender.EndLend()
	if b == h || b.g != h.g || b.closed || b.hold || !b.packed {
		return nil
	}
	s, first, err := b.segmentWithRoom(kind, k, k)
	if err != nil {
		return nil // h's own runs will say why, if they have no room either
	}
	pg := newPage(h, s, first, k, h.classes[c].size, int16(c))
	fresh, err := b.prepareRange(s, uintptr(first)<<sliceShift, uintptr(k)<<sliceShift)
	if err != nil {
		b.refused(err)
		pg.dead = true
		b.vacatePage(pg)
		return nil
	}
	pg.fresh, pg.ctop, pg.limit = fresh, uint32(k)<<sliceShift, pg.nblocks
	b.nlent++
	return pg
}

// lent returns the heap that lent class page pg's room, nil when it is h's own.
func (h *Heap) lent(pg *page) *Heap {
	if o := pg.seg.runOwner; o != nil && o != h {
		return o
	}
	return nil
}

// giveBack returns the room of borrowed page pg, dead and forgotten by h, to its lender b: at
// once when b is free, else through b's returned list.
func (h *Heap) giveBack(pg *page, b *Heap) {
	if l := h.lender; l != nil {
		if x := l.TryLend(); x == b {
			b.takeBack(pg)
			l.EndLend()
			return
		} else if x != nil {
			l.EndLend()
		}
	}
	for {
		old := b.returned.Load()
		pg.nextReturn = old
		if b.returned.CompareAndSwap(old, pg) {
			return
		}
	}
}

// takeBackReturned takes back the room of every page returned to h since its last look.
func (h *Heap) takeBackReturned() {
	if h.returned.Load() == nil {
		return // the usual case: a load, not a swap
	}
	for pg := h.returned.Swap(nil); pg != nil; {
		next := pg.nextReturn
		pg.nextReturn = nil
		h.takeBack(pg)
		pg = next
	}
}

// takeBack vacates the slices of a page h lent, as for a page of its own. h is open: its Close
// refuses while pages it lent are out (ErrLent).
func (h *Heap) takeBack(pg *page) {
	h.nlent--
	h.vacatePage(pg)
}
