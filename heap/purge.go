// Purging the memory of free blocks: a class page commits its memory as its bump index
// reaches it (extend), and the blocks it hands out and takes back stay committed however few
// of them are live. Where the arena's granule is no bigger than a slice (a host page for
// locked and pageable memory), a purge gives back what no live block touches: the whole
// granules inside each run of free blocks, and the part of the page above the last live block.
//
// # Purged blocks
//
// A free block whose memory a purge gave up (one of its granules, at least) is purged: it
// stays on the page's free list, behind the nfree blocks allocation takes, so that neither
// the allocation's fast path nor the free's changes at all. The free list is nfree committed
// blocks, then npurged purged ones: pop takes from its head while nfree lasts, and a free
// pushes a committed block (the one it frees) at the head. When a page has no committed free
// block left, allocSlow revives some purged ones (revive): it commits the granules given up
// around the first of them and moves those it made whole to the front.
//
// The run of free blocks that ends at the bump index is not purged but taken back: the bump
// index moves down to the run's first block, whose blocks are as if never handed out, and the
// memory above goes back with the page's reach (ctop). A page left with no live block holds no
// memory at all.
//
// # When
//
// Trim purges every page at once. PurgeIdle purges the pages unused since its last look: the
// owner calls it every purge delay or so (package pinned does, off the allocating goroutines,
// while its pool has been busy), and memory untouched between two looks goes, given to the
// arena as memory idle for the delay already (arena.DecommitIdle: decommitted at the purge
// timer's next tick). A page counts as used when it served an allocation or took a free; its
// count of both (page.allocs and page.frees) is what a look compares, so neither fast path
// counts anything more.
//
// Invariants, for a class page pg:
//   - the free list holds pg.nfree committed blocks (every granule they touch wanted by the
//     arena), then pg.npurged purged ones, each below the bump index;
//   - every granule a live block, a committed free block or a block in [bump, limit) touches
//     is wanted, below ctop and not in pg.gone; limit is the blocks wholly below ctop;
//   - pg.gone marks granules below ctop that a purge gave up and no revive has claimed again;
//     a slice of the segment holding one has its decommit bit set.

package heap

import (
	"errors"
	"math/bits"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/bitset"
)

// fineGranules reports whether the arena commits in granules no bigger than a slice, and
// decommits: whether a page's free blocks can give their memory back apart from the page.
func (g *Group) fineGranules() bool { return g.granule <= sliceSize && g.decommits }

// revive commits again the granules a purge gave up around pg's first purged block (the
// slices it touches) and moves every purged block they make whole to the front of the free
// list, as committed free blocks. The page has no committed free block (nfree is 0), so its
// head is the first purged block. It fails only when no block could be made whole.
func (h *Heap) revive(pg *page) error {
	g := h.g.granule
	first := uintptr(pg.head) * pg.bsize
	lo := first &^ (sliceSize - 1)
	hi := min((first+pg.bsize+sliceSize-1)&^(sliceSize-1), uintptr(pg.ctop))
	if h.tight { // the block's granules alone (see extend)
		lo, hi = first&^(g-1), (first+pg.bsize+g-1)&^(g-1)
	}
	err := pg.gone.Runs(int(lo/g), int((hi+g-1)/g), true, func(s, e int) error {
		if _, err := h.a.Commit(pg.base+uintptr(s)*g, uintptr(e-s)*g); err != nil {
			h.refused(err)
			return err
		}
		pg.gone.SetRange(s, e, false)
		return nil
	})
	// What was committed stays so, whatever failed later: the blocks it made whole move.
	whole, purged := h.scratch[:0], h.scratch2[:0]
	for i, idx := uint32(0), pg.head; i < pg.npurged; i++ {
		if pg.touchesGone(idx, g) {
			purged = append(purged, idx)
		} else {
			whole = append(whole, idx)
		}
		idx = pg.state[idx] &^ freeLink
	}
	h.scratch, h.scratch2 = whole[:0], purged[:0]
	if len(whole) == 0 {
		return err
	}
	pg.relink(whole, purged)
	h.watch(pg)
	return nil
}

// touchesGone reports whether block idx touches a granule the page gave up.
func (pg *page) touchesGone(idx uint32, g uintptr) bool {
	if pg.gone == nil {
		return false
	}
	lo := uintptr(idx) * pg.bsize
	return pg.gone.Count(int(lo/g), int((lo+pg.bsize-1)/g)+1) != 0
}

// relink rebuilds pg's free list as the blocks committed (nfree of them) followed by the
// blocks purged, linking their state words (see freeLink).
func (pg *page) relink(committed, purged []uint32) {
	pg.nfree, pg.npurged = uint32(len(committed)), uint32(len(purged))
	var prev *uint32
	for _, list := range [2][]uint32{committed, purged} {
		for _, idx := range list {
			if prev == nil {
				pg.head = idx
			} else {
				ownerStore(prev, freeLink|idx)
			}
			prev = &pg.state[idx]
		}
	}
	if prev != nil {
		ownerStore(prev, freeLink) // the last: its link is never followed
	}
}

// purgePage gives the arena the memory of class page pg that no block needs: the whole
// granules inside each run of free blocks below the run that ends at the bump index, which
// become purged, and everything above the first block of that run, which the bump index takes
// back (see the file's documentation). aged says the page has been idle for the purge delay
// (the arena decommits at its next tick); otherwise the memory waits for the purge delay, or
// for the arena's Trim. It returns the bytes it gave up.
func (h *Heap) purgePage(pg *page, aged bool) uintptr {
	g := h.g.granule
	if !h.g.fineGranules() || pg.base%g != 0 {
		return 0
	}
	n := pg.nfree + pg.npurged
	if n == 0 && uintptr(pg.ctop) <= (uintptr(pg.bump)*pg.bsize+g-1)&^(g-1) {
		return 0 // no free block, and nothing committed above the bump index's granule
	}
	list := h.scratch[:0]
	free := h.freeScratch(int(pg.nblocks))
	for i, idx := uint32(0), pg.head; i < n; i++ {
		list = append(list, idx)
		free.SetRange(int(idx), int(idx)+1, true)
		idx = pg.state[idx] &^ freeLink
	}
	if pg.gone == nil {
		gone := bitset.New(int(uintptr(pg.nslice) << sliceShift / g))
		pg.gone = &gone
	}
	// The run of free blocks that ends at the bump index.
	top := int(pg.bump)
	for top > 0 && free.Get(top-1) {
		top--
	}
	runs := h.runScratch[:0]
	giveUp := func(glo, ghi int) {
		_ = pg.gone.Runs(glo, ghi, false, func(s, e int) error {
			if k := len(runs); k > 0 && runs[k-1][1] == s {
				runs[k-1][1] = e
			} else {
				runs = append(runs, [2]int{s, e})
			}
			return nil
		})
		pg.gone.SetRange(glo, ghi, true)
	}
	for s := free.Next(0, top, true); s < top; {
		e := free.Next(s, top, false)
		if glo, ghi := int((uintptr(s)*pg.bsize+g-1)/g), int(uintptr(e)*pg.bsize/g); ghi > glo {
			giveUp(glo, ghi)
		}
		s = free.Next(e, top, true)
	}
	newTop := (uintptr(top)*pg.bsize + g - 1) &^ (g - 1)
	if uintptr(pg.ctop) > newTop {
		giveUp(int(newTop/g), int(uintptr(pg.ctop)/g))
		pg.gone.SetRange(int(newTop/g), int(uintptr(pg.ctop)/g), false) // above ctop: not the page's
	}
	// The free list again: the blocks below top, committed first; those at and above top are
	// beyond the bump index now, and read as never handed out.
	committed, purged := h.scratch2[:0], h.scratch3[:0]
	for _, idx := range list {
		switch {
		case int(idx) >= top:
			ownerStore(&pg.state[idx], 0)
		case pg.touchesGone(idx, g):
			purged = append(purged, idx)
		default:
			committed = append(committed, idx)
		}
		free.SetRange(int(idx), int(idx)+1, false)
	}
	pg.relink(committed, purged)
	if uint32(top) < pg.bump {
		pg.fresh = false // the blocks taken back were written
		pg.bump = uint32(top)
	}
	pg.ctop = uint32(newTop)
	pg.limit = min(uint32(newTop/pg.bsize), pg.nblocks)
	h.watch(pg)
	h.scratch, h.scratch2, h.scratch3 = list[:0], committed[:0], purged[:0]
	var gave uintptr
	for _, r := range runs {
		lo, hi := pg.base+uintptr(r[0])*g, pg.base+uintptr(r[1])*g
		pg.seg.decommit |= pg.seg.slicesOf(lo, hi) // not known committed any more
		var err error
		if aged {
			err = h.a.DecommitIdle(lo, hi-lo)
		} else {
			err = h.a.Decommit(lo, hi-lo)
		}
		if err == nil {
			gave += hi - lo
		}
	}
	h.runScratch = runs[:0]
	return gave
}

// freeScratch returns the heap's scratch bitset of at least n bits, all clear: purgePage
// clears what it sets before it returns.
func (h *Heap) freeScratch(n int) bitset.Set {
	if len(h.freeBits)*64 < n {
		h.freeBits = bitset.New(n)
	}
	return h.freeBits
}

// slicesOf returns the mask of the slices of s that [lo, hi) touches.
func (s *segment) slicesOf(lo, hi uintptr) uint64 {
	first, last := int((lo-s.base)>>sliceShift), int((hi-1-s.base)>>sliceShift)
	return sliceMask(first, last-first+1)
}

// PurgeIdle gives the arena the memory that the heap has left unused since the previous call:
// the free blocks' and the bump index's reach of the class pages that served no allocation and
// took no free in between; and, when none did, the empty pages kept for reuse and
// the free slices of its segments, untouched since the previous call (a busy heap keeps those,
// which its next pages take without a system call). It reports whether memory in use since the
// previous call may go at a later one: a caller calls again, a purge delay or so later, while
// it is true. The arena decommits what was idle at its purge timer's next tick. The owner
// calls it; a heap with RetainSegments gives nothing (see Retention): Trim is its owner's to
// call.
func (h *Heap) PurgeIdle() (pending bool) {
	if h.hold || h.closed {
		return false
	}
	h.Collect()
	h.takeBackReturned()
	busy := false
	empties := h.emptyScratch[:0]
	for c := range h.classes {
		cl := &h.classes[c]
		cl.made = 0
		for _, pg := range cl.all {
			switch ops := pg.allocs() + pg.frees; {
			case ops != pg.seenOps:
				pg.seenOps, pg.settled = ops, false
				busy = true
			case pg.settled:
			case pg.empty() && pg.avail.Linked():
				// An idle spare, a page a non-blocking free emptied, or the class's current
				// page: given back whole, not purged, so that no current page is left with no
				// block at hand, to be passed over for another and stay empty for good.
				empties = append(empties, pg)
			default:
				pg.settled = true
				h.purgePage(pg, true)
			}
		}
	}
	pending = busy
	if !busy {
		for _, pg := range empties {
			if c := uint8(pg.class); h.cur[c] == pg {
				h.setCur(c, &h.classes[c].empty)
			}
			h.release(pg)
		}
		pending = h.purgeSlices(true)
	}
	h.forgetRecent()
	clear(empties)
	h.emptyScratch = empties[:0]
	h.checkInvariants("PurgeIdle")
	return pending
}

// OpsHint returns how many allocations and frees the heap has made, for a goroutine other
// than its owner that wants to know, without stopping the owner, whether the heap has been
// busy since it last looked (package pinned's purger): the counters' loads may be stale, and
// race with the owner's plain stores, but a load of one word is never torn. Under the race
// detector the caller must order the call with the owner's work (hold the owner's lock).
func (h *Heap) OpsHint() uint64 { return atomic.LoadUint64(&h.allocs) + atomic.LoadUint64(&h.frees) }

// FreeMark returns how many frees the heap has taken, a count that only grows: a block handed
// out now was freed at or before it, if it was freed at all. The owner calls it (package
// device: a stream known to have passed a point placed at mark m has passed the work that
// used every block freed in the heap up to m).
func (h *Heap) FreeMark() uint64 { return h.frees }

// purgeSlices gives the arena the free slices of the heap's segments that are still
// committed (a small page given back keeps its memory for the next page: see freeSlices):
// those free at the previous look too when idle is set, all of them otherwise. It reports
// whether some were left for a later look.
func (h *Heap) purgeSlices(idle bool) (pending bool) {
	for k := range h.segs {
		for s := h.segs[k].Front(); s != nil; s = s.room.Next() {
			m := s.free &^ s.decommit
			give := m
			if idle {
				give &= s.seenFree
				s.seenFree = m
				pending = pending || give != m
			}
			for give != 0 {
				first := bits.TrailingZeros64(give)
				n := bits.TrailingZeros64(^(give >> uint(first)))
				lo, size := s.base+uintptr(first)<<sliceShift, uintptr(n)<<sliceShift
				var err error
				if idle {
					err = h.a.DecommitIdle(lo, size)
				} else {
					err = h.a.Decommit(lo, size)
				}
				if err == nil {
					s.decommit |= sliceMask(first, n)
				}
				give &^= sliceMask(first, n)
			}
		}
	}
	return pending
}

// refused notes a commit the arena refused: for want of memory (the memlock limit, device
// memory), the heap commits its pages' memory block by block from then on (tight).
func (h *Heap) refused(err error) {
	if errors.Is(err, arena.ErrMemlock) || errors.Is(err, arena.ErrExhausted) {
		h.tight = true
	}
}
