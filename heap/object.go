// Object pages and huge objects: requests above the largest class.
//
// Up to HugeThreshold (1 MiB; a whole segment where memory is coarse: pack.go) a request gets an
// object page: one block of whole slices in an object segment, so that several share a chunk. Above
// it, a huge object: a run of chunks of its own straight from the arena, committed only as far as
// it reaches. Both are kept when freed (a few of each, see maxObjFree and maxBigFree) for the next
// request of about their size, their memory an idle kept range (internal/keep) that the arena's
// purge gives up if it stays unused for the purge delay (see the package documentation, "Kept
// object pages and huge objects").
//
// Invariants: a kept page's block is free and its range tracked, idle or given up, never busy;
// a live one's range is busy and committed (object pages: their slices' decommit bits clear;
// huge objects: committed up to page.want).

package heap

import "fmt"

// allocBig serves requests above maxClassSize (and aligned requests no class can serve): an
// object page in an object segment up to half a segment, a huge chunk run above.
func (h *Heap) allocBig(n, alignment uintptr) (uintptr, bool, error) {
	if h.closed {
		return 0, false, ErrClosed
	}
	if n == 0 {
		return 0, false, ErrInvalidSize
	}
	if c := h.a.Capacity(); n > c || alignment > c {
		// Nothing the heap could give back would serve it: refused before the trim and the
		// second try that a full arena takes (fromArena).
		return 0, false, fmt.Errorf("%w: %d bytes aligned to %d asked of an arena of %d", ErrTooLarge, n,
			alignment, c)
	}
	if h.pending.head.Load() != nil {
		h.collectPending() // kept pages freed by other goroutines (or left by TryFree) come back
	}
	if n <= h.objMax && alignment <= min(segSize, h.g.chunkAlign) {
		k := int((n + sliceSize - 1) >> sliceShift)
		if pg := h.reuseObject(k, alignment); pg != nil {
			if h.hold {
				// As it was left: a held heap keeps its object pages committed (freeObject).
				return h.takeObject(pg, n), false, nil
			}
			if !(pg.tracked && pg.kept.Claim()) {
				// The arena gave it up (or never tracked it): its memory may be gone.
				pg.unknownCommitted()
			} else if pg.knownCommitted() {
				// As it was left: committed, wanted, dirty. No arena call.
				return h.takeObject(pg, n), false, nil
			}
			fresh, err := h.preparePage(pg)
			if err != nil {
				h.idle(pg)
				h.objFree = append(h.objFree, pg)
				return 0, false, err
			}
			return h.takeObject(pg, n), fresh, nil // fresh when the purge took its memory
		}
		step := max(int(alignment>>sliceShift), 1)
		s, first, err := h.segmentWithRoom(segObject, k, step)
		if err != nil {
			return 0, false, err
		}
		pg := newPage(h, s, first, k, uintptr(k)<<sliceShift, -1)
		fresh, err := h.preparePage(pg)
		if err != nil {
			h.freeSlices(pg) // and a segment made for it goes back
			return 0, false, err
		}
		h.afterCarve(s)
		return h.takeObject(pg, n), fresh, nil
	}
	if pg := h.reuseHuge(n, alignment); pg != nil {
		if !(pg.tracked && pg.kept.Claim()) {
			pg.want = 0 // the arena gave it up (or never tracked it): its memory may be gone
		} else if n <= pg.want {
			// As it was left, committed and wanted: no arena call, unless the tail it does
			// not need spans a granule, which goes to the purge (tailToPurge).
			if h.tailToPurge(pg, n) && h.a.Decommit(pg.base+n, pg.want-n) == nil {
				pg.want = n
			}
			return h.takeObject(pg, n), false, nil
		}
		zeroed, err := h.a.Commit(pg.base, n)
		if err != nil {
			h.idle(pg)
			h.bigFree = append(h.bigFree, pg)
			return 0, false, err
		}
		pg.want = n
		return h.takeObject(pg, n), zeroed, nil
	}
	if m := h.a.MaxSpan(alignment); n > m {
		// An external region, fixed in place, holds less at this alignment than the capacity:
		// as above, nothing given back would serve it. Asked here, where the arena is, not
		// before a kept object's reuse.
		return 0, false, fmt.Errorf("%w: %d bytes aligned to %d asked of an arena of %d, whose external region holds at most %d bytes at that alignment",
			ErrTooLarge, n, alignment, h.a.Capacity(), m)
	}
	span, err := h.fromArena(h.a.Alloc, n, alignment)
	if err != nil {
		return 0, false, err
	}
	s := &segment{span: span, base: span.Base, kind: segHuge}
	pg := &page{heap: h, seg: s, base: span.Base, span: span.Size, bsize: span.Size, nblocks: 1, class: -1,
		mode: shared, state: make([]uint32, 1), remote: make([]atomicWord, 1)}
	pg.want = span.Size
	s.huge = pg
	if h.packed && h.g.packRuns {
		h.packTail(pg)
	}
	h.g.register(s)
	h.nhuge++
	return h.takeObject(pg, n), span.Zeroed, nil
}

// takeObject marks the single block of an object or huge page live.
func (h *Heap) takeObject(pg *page, n uintptr) uintptr {
	pg.objSize.Store(n)
	takeStore(&pg.state[0], stateOf(n)) // see freedRemote
	h.allocs++
	h.live += n
	if h.live > h.peak {
		h.peak = h.live
	}
	return pg.base
}

// maxObjFree and maxBigFree bound the freed object pages and huge objects a heap keeps for
// reuse. A packed heap keeps packedObjFree object pages (Heap.objKeep): a kept page holds its
// slices where the next pages of other sizes would go: on the serving trace (eight seeds, the
// chunks holding a page at the peak) four kept pages cost 1.2 % more than one, and one 0.4 %
// more than none, while one still serves a loop that frees and takes again a buffer of one
// size.
const (
	maxObjFree    = 4
	maxBigFree    = 2
	packedObjFree = 1
)

// reuseObject takes a kept object page of k to k+k/8 slices aligned as asked, if there is one.
func (h *Heap) reuseObject(k int, alignment uintptr) *page {
	for i, pg := range h.objFree {
		if int(pg.nslice) >= k && int(pg.nslice) <= k+k/8 && pg.base%alignment == 0 {
			h.objFree = append(h.objFree[:i], h.objFree[i+1:]...)
			return pg
		}
	}
	return nil
}

// reuseHuge takes a kept huge object of n to 2n bytes aligned as asked, if there is one. Only
// the n bytes asked for are committed again (a tail of a granule or more that a kept object
// still holds goes to the purge, but over an arena.Joiner: tailToPurge); the rest stays
// purgeable. On a miss every kept
// object goes back to the arena, whose first fit may then reuse its chunks at once: keeping
// them would commit new memory beside memory waiting to be purged.
func (h *Heap) reuseHuge(n, alignment uintptr) *page {
	for i, pg := range h.bigFree {
		if n <= pg.bsize && n >= pg.bsize/2 && pg.base%alignment == 0 {
			h.bigFree = append(h.bigFree[:i], h.bigFree[i+1:]...)
			return pg
		}
	}
	h.dropAll(&h.bigFree)
	return nil
}

// tailToPurge reports whether reusing the kept huge object pg, committed and wanted, for an
// object of n bytes gives the tail past n to the purge: when it spans a granule, and the
// provider is no arena.Joiner. A Joiner's purge of the tail would cut the unit (a
// registration) that holds the live object: unregister it and register its part again while
// the object is in use, so the tail stays committed until the object is freed.
func (h *Heap) tailToPurge(pg *page, n uintptr) bool {
	return !h.g.joins && pg.want-n >= h.g.granule
}

// freeObject gives back an object or huge page whose block was freed.
func (h *Heap) freeObject(pg *page) {
	h.live -= pg.objSize.Load()
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
	// unless the page is reused within the delay; a held heap's stays committed, untracked,
	// until Trim (see Retention).
	if !h.hold {
		h.idle(pg)
	}
	h.keep(&h.objFree, pg, h.objKeep)
}

// idle hands the memory of a freed object or huge page to the arena as an idle tracked range (a
// kept range, internal/keep): it stays committed and wanted, so that reusing the page within the
// purge delay costs no arena call (see Claim in allocBig), and the arena's purge timer gives it up
// when it stays idle for the delay, or Trim does. The range is tracked at the page's first free and
// until it is dropped. A range the arena refuses to track goes to the purge at once (Decommit) and
// is committed again at reuse.
func (h *Heap) idle(pg *page) {
	size := pg.bsize // a huge object's span
	if pg.seg.kind != segHuge {
		size = uintptr(pg.nslice) << sliceShift
	}
	if !pg.tracked {
		if h.kt.Track(&pg.kept, pg.base, size) != nil {
			if h.a.Decommit(pg.base, size) == nil {
				if pg.seg.kind != segHuge {
					pg.unknownCommitted()
				}
				pg.want = 0
			}
			return
		}
		pg.tracked = true
	}
	if h.kc.Idle(&pg.kept) {
		h.kt.Start(true)
	}
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
		if h.kt.Untrack(&pg.kept) && pg.seg.kind != segHuge {
			pg.unknownCommitted() // given up: see freeSlices
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
	if ts := pg.tail; ts != nil {
		pg.tail = nil
		h.vacate(ts, sliceMask(0, int(pg.nslice))) // its last chunk, which object pages may share
	}
}
