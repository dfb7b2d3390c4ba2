// Segments: one 2 MiB arena chunk each, cut into 64 slices of 32 KiB that pages take in runs.
//
// A segment holds pages of one kind (small, medium, large class pages, or object pages), so
// that small pages never fragment the room larger ones need; a huge object is a segment of its
// own (a run of chunks, segHuge) with one page. A heap keeps, per kind, the segments that still
// have free slices; an empty segment is kept as the spare (all of them with RetainSegments,
// committed, until Trim) or goes back to the arena.
//
// Invariants, for every segment s:
//   - bit i of s.free is set iff s.pages[i] is nil; s.npages counts the distinct pages;
//   - a segment of the heap's outside the runs is on its kind's list of segments with room
//     (Heap.segs) exactly while it has a free slice, and the lists hold no other segment;
//   - s.decommit marks slices not known to be committed (never used since the chunk was
//     reserved, or given back); a page commits its slices before it hands them out
//     (prepareRange), so a live block's slices are committed;
//   - s.dirtyBits marks slices handed out since the chunk last read as zero: a block is
//     fresh (reads zero) only while every slice of its page was clean when committed;
//   - a segment is registered in its group's tables while it holds pages (a segment of a run:
//     while its run is the heap's, see pack.go), and never reused once unregistered: a spare
//     comes back as a new struct.

package heap

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/ilist"
)

// segKind is what a segment holds. Which kind holds each size class's pages, and how many
// slices such a page takes, are in sizeclasses.go (classKind, classSlices).
type segKind uint8

const (
	segSmall  segKind = iota // 32 pages of 64 KiB
	segMedium                // 4 pages of 512 KiB
	segLarge                 // 1 page of 2 MiB
	segObject                // object pages: one block of whole slices each
	segHuge                  // a huge object: a chunk run with one page
	segPacked                // a chunk of a run: pages of every kind, where memory is coarse (pack.go)
	numSegKinds
)

// segment is one arena chunk (or, for a huge object, a run of chunks).
type segment struct {
	// Read by every lookup, first: span.Size bounds the address table's answer (see Group).
	span      arena.Span
	base      uintptr
	huge      *page
	pages     [segSlices]atomic.Pointer[page] // page covering each slice
	kind      segKind
	free      uint64 // bit set: slice free
	npages    int
	nclass    int    // class pages among them (pack.go: where class pages go)
	dirtyBits uint64 // slices handed out since the chunk last read as zero
	decommit  uint64 // slices not known to be committed: never used, or given back
	seenFree  uint64 // free slices still committed at PurgeIdle's last look
	run       *run   // the run it is part of, where memory is coarse (pack.go)
	ri        int    // its index in the run
	// runOwner is the owner of its run, set with it and never changed (a run may split: Trim),
	// so that a heap borrowing its slices may read it (lend.go), where run and ri are its owner's.
	runOwner *Heap
	recent   bool                 // a segment of a run emptied since PurgeIdle's last look
	spareAt  uint64               // when it became a spare, counted in the heap's spareN (spare.go)
	room     ilist.Links[segment] // on its kind's list of segments with room (Heap.segs) or not
}

func sliceMask(first, n int) uint64 {
	if n == 64 {
		return ^uint64(0)
	}
	return (1<<uint(n) - 1) << uint(first)
}

// findSlices returns the first run of n free slices in s starting at a multiple of step.
func (s *segment) findSlices(n, step int) (int, bool) {
	run := s.free
	for i := 1; i < n && run != 0; i++ {
		run &= s.free >> uint(i)
	}
	for run != 0 {
		i := bits.TrailingZeros64(run)
		if i%step == 0 && i+n <= segSlices {
			return i, true
		}
		run &^= 1 << uint(i)
	}
	return 0, false
}

// segList is a kind's list of segments with room (Heap.segs), linked through segment.room.
type segList = ilist.List[segment]

// listRoom puts s on its kind's list of segments with room, unless it is on it.
func (h *Heap) listRoom(s *segment) {
	if !s.room.Linked() {
		h.segs[s.kind].PushFront(s, &s.room)
	}
}

// unlistRoom takes s off its kind's list of segments with room, if it is on it.
func (h *Heap) unlistRoom(s *segment) {
	if s.room.Linked() {
		h.segs[s.kind].Remove(&s.room)
	}
}

// segmentWithRoom returns a segment of the kind with n free slices starting at a multiple of
// step, taking the spare or a new chunk when none has room; a packed heap's pages go into its
// runs (pack.go).
func (h *Heap) segmentWithRoom(kind segKind, n, step int) (*segment, int, error) {
	h.releaseDeferred() // their slices may be the room
	if h.packed {
		return h.roomInRuns(n, step, kind == segObject)
	}
	for s := h.segs[kind].Front(); s != nil; s = s.room.Next() {
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
	if s.free == 0 && s.run == nil {
		h.unlistRoom(s)
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
		// Reserved, not committed: pages commit their own slices (prepareRange), so a
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
	h.listRoom(s)
	return s, nil
}

// fromArena takes a span from the arena with take (Alloc, or Reserve for a segment). When the
// arena is full, frees pending in the heap may have emptied segments and kept objects that can
// go back first: it collects them and tries once more; a full arena is then ErrOutOfMemory.
// A failure that cannot be for want of memory (an invalid request, a closed provider, a
// provider's peer breaking its protocol or silent) is not tried again; every failure but a
// full arena keeps its own sentinel.
//
// A heap with RetainSegments never trims itself here: its memory changes owner only when its
// owner calls Trim, having seen the outside work that may use it end (device synchronizes the
// heap's stream). Trimming here handed segments with copies still queued on a stream to the
// arena, where another stream's heap took them (issue 25).
func (h *Heap) fromArena(take func(size, alignment uintptr) (arena.Span, error), size, alignment uintptr) (arena.Span, error) {
	span, err := take(size, alignment)
	if err == nil {
		return span, nil
	}
	if !arena.Exhausted(err) {
		return arena.Span{}, err
	}
	if !h.hold {
		h.Trim()
		span, err = take(size, alignment)
	}
	switch {
	case err == nil:
		return span, nil
	case errors.Is(err, arena.ErrCapacity):
		return arena.Span{}, fmt.Errorf("%w: %w", ErrOutOfMemory, err)
	}
	return arena.Span{}, err // memlock, commit or driver failures keep their own sentinel
}

// preparePage readies the slices of an object page, which may run on into the next segments
// of a run (pack.go), as prepareRange readies a range.
func (h *Heap) preparePage(pg *page) (fresh bool, err error) {
	fresh = true
	pg.pieces(func(s *segment, m uint64) {
		if err != nil {
			return
		}
		var f bool
		first := bits.TrailingZeros64(m)
		f, err = h.prepareRange(s, uintptr(first)<<sliceShift, uintptr(bits.OnesCount64(m))<<sliceShift)
		fresh = fresh && f
	})
	return fresh, err
}

// unknownCommitted marks the slices of object page pg not known to be committed (the arena gave
// its memory up, or may have).
func (pg *page) unknownCommitted() {
	pg.pieces(func(s *segment, m uint64) { s.decommit |= m })
}

// knownCommitted reports whether every slice of object page pg is known to be committed.
func (pg *page) knownCommitted() bool {
	known := true
	pg.pieces(func(s *segment, m uint64) { known = known && s.decommit&m == 0 })
	return known
}

// prepareRange readies the n bytes at offset off of s for a page that hands them out. It
// commits them unless their slices are all known committed (never used since the segment was
// reserved, or given back to the provider by an earlier page), reports whether they read as
// zero, and marks their slices dirty: whatever page holds them next must not take them for
// fresh. The range may start and end inside a slice (a class page extended after a purge gave
// up its top, or block by block: see purgePage and extend); a slice it covers in part counts
// as touched, not as known committed: the rest of it is not the range's to vouch for.
func (h *Heap) prepareRange(s *segment, off, n uintptr) (fresh bool, err error) {
	first, last := int(off>>sliceShift), int((off+n-1)>>sliceShift)
	m := sliceMask(first, last-first+1)
	whole := m
	if off&(sliceSize-1) != 0 {
		whole &^= 1 << uint(first)
	}
	if (off+n)&(sliceSize-1) != 0 {
		whole &^= 1 << uint(last)
	}
	if s.decommit&m != 0 {
		zeroed, err := h.a.Commit(s.base+off, n)
		if err != nil {
			return false, err
		}
		s.decommit &^= whole
		if zeroed {
			s.dirtyBits &^= whole
		}
	}
	fresh = s.dirtyBits&m == 0
	s.dirtyBits |= m
	return fresh, nil
}

// freeSlices returns a page's slices to its segment, and an empty segment to the spare slot or
// the arena.
func (h *Heap) freeSlices(pg *page) {
	pg.dead = true
	if pg.class >= 0 {
		h.forget(pg)
		if b := h.lent(pg); b != nil {
			h.giveBack(pg, b)
			return
		}
	}
	h.vacatePage(pg)
}

// vacatePage frees the slices of page pg, which h's segments hold (its own page, or one it
// lent), as vacate does.
func (h *Heap) vacatePage(pg *page) {
	if pg.class >= 0 {
		pg.seg.nclass--
	}
	pg.pieces(h.vacate)
}

// vacate frees the slices m of s, which a page held, and gives the segment back when it is
// empty.
func (h *Heap) vacate(s *segment, m uint64) {
	for r := m; r != 0; r &= r - 1 {
		s.pages[bits.TrailingZeros64(r)].Store(nil)
	}
	s.free |= m
	s.npages--
	if s.run != nil {
		h.vacateRun(s)
		return
	}
	if s.npages > 0 {
		// The segment stays. A page of 512 KiB or more gives its memory to the arena's purge
		// unless a new page claims it within the delay; small pages churn too fast for that
		// to pay (it would bring commit system calls back into steady states). A held heap
		// gives nothing to the purge (see below).
		first := bits.TrailingZeros64(m)
		if !h.hold && s.kind != segSmall && s.decommit&m != m && h.a.Decommit(s.base+uintptr(first)<<sliceShift, uintptr(bits.OnesCount64(m))<<sliceShift) == nil {
			s.decommit |= m
		}
		h.listRoom(s)
		return
	}
	h.unlistRoom(s)
	h.g.unregister(s)
	if h.hold {
		// Kept, committed, until Trim: a decommit is a change of owner too (the memory goes
		// back to the provider when the purge runs, whatever still uses it), and a held heap's
		// memory changes owner only at its owner's Trim (see Retention), or ReleaseSpares.
		h.spare(s)
		return
	}
	if len(h.spares) == 0 {
		// Kept for reuse, but its memory goes to the arena's purge unless claimed in time.
		if h.a.Decommit(s.base, segSize) == nil {
			s.decommit = ^uint64(0)
		}
		h.spare(s)
		return
	}
	_ = h.a.Free(s.span)
	h.nsegs--
}
