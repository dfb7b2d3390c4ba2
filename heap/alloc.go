package heap

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/align"
)

// Alloc returns the address of a block of at least n bytes that meets the heap's alignment.
// Its contents are undefined. It fails with ErrInvalidSize for n == 0, ErrTooLarge above the
// arena's capacity and an error wrapping arena.ErrCapacity when the arena is full.
func (h *Heap) Alloc(n uintptr) (uintptr, error) {
	// The fast path is allocClass written out: calling it costs about 1 ns of a 24 ns pair.
	if n-1 < maxClassSize {
		c := h.class(n)
		pg := h.cur[c]
		var idx uint32
		if pg.nfree > 0 {
			pg.nfree--
			idx = uint32(pg.free[pg.nfree])
		} else if pg.bump < pg.limit {
			idx = pg.bump
			pg.bump++
		} else {
			p, _, err := h.allocSlow(n, c)
			return p, err
		}
		return h.take(pg, idx, n), nil
	}
	p, _, err := h.allocBig(n, h.align)
	return p, err
}

// class returns the heap class of a request of 1 to maxClassSize bytes.
func (h *Heap) class(n uintptr) uint8 {
	if n <= smallMax {
		return h.small[(n+15)>>4]
	}
	// Eight classes to each doubling above 128 B: find the doubling, then the eighth.
	l := uint(bits.Len64(uint64(n-1))) - 1
	return h.classOf[8+(l-7)*8+uint((n-1-1<<l)>>(l-3))]
}

// take marks block idx of pg live and returns its address.
func (h *Heap) take(pg *page, idx uint32, n uintptr) uintptr {
	pg.state[idx] = uint32(n) // see freedRemote
	pg.allocs++
	h.allocs++
	h.live += n
	if h.live > h.peak {
		h.peak = h.live
	}
	return pg.base + uintptr(idx)*pg.bsize
}

// Zalloc is Alloc with the block cleared. The clear is skipped when the block is fresh from the
// provider and known to read as zero.
func (h *Heap) Zalloc(n uintptr) (uintptr, error) {
	p, fresh, err := h.alloc(n, h.align)
	if err != nil || fresh {
		return p, err
	}
	if err := h.a.Zero(p, n); err != nil {
		_ = h.Free(p)
		return 0, err
	}
	return p, nil
}

// AllocAligned is Alloc for a block whose address is a multiple of alignment, any power of two
// (beyond the chunk size too). The block can be freed like any other: its address is its start.
func (h *Heap) AllocAligned(n, alignment uintptr) (uintptr, error) {
	p, _, err := h.alloc(n, alignment)
	return p, err
}

// alloc is the general path: any size, any alignment; fresh reports a block that reads as zero.
func (h *Heap) alloc(n, alignment uintptr) (p uintptr, fresh bool, err error) {
	if !align.IsPow2(alignment) {
		return 0, false, fmt.Errorf("%w: %d", ErrInvalidAlign, alignment)
	}
	if alignment <= h.align && n-1 < maxClassSize {
		return h.allocClass(n, h.class(n))
	}
	if alignment > h.align && n-1 < maxClassSize && alignment <= min(sliceSize, h.g.chunkAlign) {
		// A class whose size is a multiple of the alignment: pages start on slice
		// boundaries, so every block in them is aligned.
		rn, _ := align.Up(n, alignment)
		for c := int(h.class(rn)); c < len(h.classes); c++ {
			if h.classes[c].size%alignment == 0 {
				return h.allocClass(n, uint8(c))
			}
		}
	}
	return h.allocBig(n, max(alignment, h.align))
}

// allocClass allocates from class c, taking the fast path when it can.
func (h *Heap) allocClass(n uintptr, c uint8) (uintptr, bool, error) {
	pg := h.cur[c]
	if pg.nfree > 0 {
		pg.nfree--
		return h.take(pg, uint32(pg.free[pg.nfree]), n), false, nil
	}
	if pg.bump < pg.limit {
		pg.bump++
		return h.take(pg, pg.bump-1, n), pg.fresh, nil
	}
	return h.allocSlow(n, c)
}

// allocSlow finds class c a page with a free block: the current page's remote frees, the next
// available page, every pending remote free, and last a new page.
func (h *Heap) allocSlow(n uintptr, c uint8) (uintptr, bool, error) {
	if h.closed {
		return 0, false, ErrClosed
	}
	cl := &h.classes[c]
	for attempt := 0; ; attempt++ {
		// Walk the class's available pages, collecting remote frees, dropping full ones.
		for pg := cl.avail.head; pg != nil; {
			next := pg.next
			if pg.pending.Load() != 0 {
				h.collectPage(pg, false)
			}
			if pg.nfree == 0 && pg.bump == pg.limit && pg.limit < pg.nblocks && h.extend(pg) != nil {
				pg = next // it stays available; another page may have a block (a new one fails alike)
				continue
			}
			if pg.nfree > 0 || pg.bump < pg.limit {
				h.cur[c] = pg
				return h.allocClass(n, c)
			}
			cl.avail.remove(pg)
			pg = next
		}
		h.cur[c] = &cl.empty
		if attempt > 0 {
			break
		}
		// Remote frees may have refilled full pages of this class.
		if !h.collectPending() {
			break
		}
	}
	pg, err := h.newClassPage(c)
	if err != nil {
		return 0, false, err
	}
	h.cur[c] = pg
	return h.allocClass(n, c)
}

// newClassPage carves a page for class c from a segment with room, or a new segment.
func (h *Heap) newClassPage(c uint8) (*page, error) {
	cl := &h.classes[c]
	kind := cl.kind
	k := int(cl.slices)
	s, first, err := h.segmentWithRoom(kind, k, k)
	if err != nil {
		return nil, err
	}
	pg := newPage(h, s, first, k, cl.size, int16(c))
	if err := h.extend(pg); err != nil {
		h.freeSlices(pg)
		return nil, err
	}
	h.afterCarve(s)
	pg.allIdx = len(cl.all)
	cl.all = append(cl.all, pg)
	cl.avail.pushFront(pg)
	return pg, nil
}

// segmentWithRoom returns a segment of the kind with n free slices starting at a multiple of
// step, taking the spare or a new chunk when none has room.
func (h *Heap) segmentWithRoom(kind segKind, n, step int) (*segment, int, error) {
	for s := h.segs[kind].head; s != nil; s = s.next {
		if i, ok := s.findSlices(n, step); ok {
			return s, i, nil
		}
	}
	s, err := h.newSegment(kind)
	if err != nil {
		return nil, 0, err
	}
	return s, 0, nil
}

// afterCarve keeps the segment in its kind's list only while it has room.
func (h *Heap) afterCarve(s *segment) {
	if s.free == 0 {
		h.segs[s.kind].remove(s)
	}
}

func (h *Heap) newSegment(kind segKind) (*segment, error) {
	var s *segment
	if n := len(h.spares); n > 0 {
		sp := h.spares[n-1]
		h.spares = h.spares[:n-1]
		// A new struct, never the old one: see the invariants.
		s = &segment{span: sp.span, base: sp.base, dirtyBits: sp.dirtyBits, decommit: sp.decommit}
		h.g.register(s)
	} else {
		// One chunk, at the alignment the arena's chunks have: asking for segSize alignment
		// of an arena whose regions are not aligned (cuMemAlloc, external) would cost a
		// second chunk for every segment.
		// Reserved, not committed: pages commit their own slices (prepareSlices), so a
		// segment holding one small object commits one page, not 2 MiB.
		span, err := h.fromArena(h.a.Reserve, segSize, h.g.chunkAlign)
		if err != nil {
			return nil, err
		}
		s = &segment{span: span, base: span.Base, dirtyBits: ^uint64(0), decommit: ^uint64(0)}
		h.g.register(s)
		h.nsegs++
	}
	s.kind = kind
	s.free = ^uint64(0)
	h.segs[kind].push(s)
	return s, nil
}

// fromArena takes a span from the arena with take (Alloc, or Reserve for a segment). When the
// arena is full, frees pending in the heap may have emptied segments and kept objects that can
// go back first: it collects them and tries once more; a full arena is then ErrOutOfMemory.
func (h *Heap) fromArena(take func(size, alignment uintptr) (arena.Span, error), size, alignment uintptr) (arena.Span, error) {
	span, err := take(size, alignment)
	if err == nil {
		return span, nil
	}
	h.Trim()
	span, err = take(size, alignment)
	switch {
	case err == nil:
		return span, nil
	case errors.Is(err, arena.ErrCapacity):
		return arena.Span{}, fmt.Errorf("%w: %w", ErrOutOfMemory, err)
	}
	return arena.Span{}, err // memlock, commit or driver failures keep their own sentinel
}

// allocBig serves requests above maxClassSize (and aligned requests no class can serve): an
// object page in an object segment up to half a segment, a huge chunk run above.
func (h *Heap) allocBig(n, alignment uintptr) (uintptr, bool, error) {
	if h.closed {
		return 0, false, ErrClosed
	}
	if n == 0 {
		return 0, false, ErrInvalidSize
	}
	if n > h.a.Capacity() {
		return 0, false, fmt.Errorf("%w: %d bytes asked of an arena of %d", ErrTooLarge, n, h.a.Capacity())
	}
	if n <= HugeThreshold && alignment <= min(segSize, h.g.chunkAlign) {
		k := int((n + sliceSize - 1) >> sliceShift)
		if pg := h.reuseObject(k, alignment); pg != nil {
			if !(pg.tracked && pg.kept.Claim()) {
				// The arena gave it up (or never tracked it): its memory may be gone.
				pg.seg.decommit |= sliceMask(pg.slice0, pg.nslice)
			} else if pg.seg.decommit&sliceMask(pg.slice0, pg.nslice) == 0 {
				// As it was left: committed, wanted, dirty. No arena call.
				return h.takeObject(pg, n), false, nil
			}
			fresh, err := h.prepareSlices(pg.seg, pg.slice0, pg.nslice)
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
		fresh, err := h.prepareSlices(s, first, k)
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
			// not need spans a granule, which goes to the purge.
			if pg.want-n >= h.g.granule && h.a.Decommit(pg.base+n, pg.want-n) == nil {
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
	span, err := h.fromArena(h.a.Alloc, n, alignment)
	if err != nil {
		return 0, false, err
	}
	s := &segment{span: span, base: span.Base, kind: segHuge}
	pg := &page{heap: h, seg: s, base: span.Base, bsize: span.Size, nblocks: 1, class: -1,
		state: make([]uint32, 1), remote: make([]atomicWord, 1)}
	pg.want = span.Size
	s.huge = pg
	h.g.register(s)
	h.nhuge++
	return h.takeObject(pg, n), span.Zeroed, nil
}

// takeObject marks the single block of an object or huge page live.
func (h *Heap) takeObject(pg *page, n uintptr) uintptr {
	pg.objSize = n
	pg.state[0] = stateOf(n) // see freedRemote
	h.allocs++
	h.live += n
	if h.live > h.peak {
		h.peak = h.live
	}
	return pg.base
}

// extend commits the next part of a class page: at least one slice, and enough slices for the
// block at the bump index. A page's memory is committed as its bump index reaches it, so a
// page of large blocks holding a few of them commits those, not its 2 MiB (mimalloc extends
// its pages the same way). Blocks handed out from the bump index stay fresh (zero) only while
// every part committed so far read as zero.
func (h *Heap) extend(pg *page) error {
	s := pg.seg
	end := uintptr(pg.bump+1) * pg.bsize // bytes of the page the next block needs
	next := min(max(pg.ncommit+1, int((end+sliceSize-1)>>sliceShift)), pg.nslice)
	first, n := pg.slice0+pg.ncommit, next-pg.ncommit
	fresh, err := h.prepareSlices(s, first, n)
	if err != nil {
		return err
	}
	pg.fresh = pg.fresh && fresh
	pg.ncommit = next
	pg.limit = min(uint32(uintptr(next)<<sliceShift/pg.bsize), pg.nblocks)
	return nil
}

// prepareSlices readies slices of s for a page that hands them out. It commits those not
// committed yet (never used since the segment was reserved, or given back to the provider by
// an earlier page), reports whether all of them read as zero, and marks them dirty: whatever
// page holds them next must not take them for fresh.
func (h *Heap) prepareSlices(s *segment, first, n int) (fresh bool, err error) {
	m := sliceMask(first, n)
	if s.decommit&m != 0 {
		zeroed, err := h.a.Commit(s.base+uintptr(first)<<sliceShift, uintptr(n)<<sliceShift)
		if err != nil {
			return false, err
		}
		s.decommit &^= m
		if zeroed {
			s.dirtyBits &^= m
		}
	}
	fresh = s.dirtyBits&m == 0
	s.dirtyBits |= m
	return fresh, nil
}

// maxObjFree and maxBigFree bound the freed object pages and huge objects a heap keeps for
// reuse.
const (
	maxObjFree = 4
	maxBigFree = 2
)

// reuseObject takes a kept object page of k to k+k/8 slices aligned as asked, if there is one.
func (h *Heap) reuseObject(k int, alignment uintptr) *page {
	for i, pg := range h.objFree {
		if pg.nslice >= k && pg.nslice <= k+k/8 && pg.base%alignment == 0 {
			h.objFree = append(h.objFree[:i], h.objFree[i+1:]...)
			return pg
		}
	}
	return nil
}

// reuseHuge takes a kept huge object of n to 2n bytes aligned as asked, if there is one. Only
// the n bytes asked for are committed again (a tail of a granule or more that a kept object
// still holds goes to the purge); the rest stays purgeable. On a miss every kept
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
