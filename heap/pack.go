// Packing memory that commits in coarse granules: a 2 MiB VMM granule of CUDA host or device
// memory, a 2 MiB registration, a hugetlb page. Such memory commits and decommits a whole
// chunk at a time, so what it costs is the number of chunks anything touches, and the heap's
// layout, meant for memory that commits a host page at a time, spends chunks freely: pages of
// each kind in segments of their own, a segment for each large class's page, a chunk for each
// object's remainder and for the tail of each huge object. On the serving trace the CUDA host
// pool held 1.8 times its peak live bytes where the locked pool, the same heap on host pages,
// held 1.07 (issue 38). Where the group's granule is a chunk or more (Group.coarse), a heap
// packs (Heap.packed), as mimalloc's segments of 32 MiB do, unless it keeps what it frees
// (RetainSegments: a device's stream heaps, whose big blocks go back to the arena at once for
// the other streams, and whose layout their owner orders on streams):
//
//   - runs: segments come in runs of up to runChunks adjacent chunks, and every page goes into
//     a run, pages of every kind together: at the place that touches the fewest empty
//     segments (whose chunk is not committed), none where it can, and among those in the
//     smallest free run of all the runs (best fit), so that pages gather, holes fill, and
//     other chunks empty; a freed object page is kept for the next buffer of its size (one:
//     packedObjFree), as a kept page holds slices others could use; an object page may run
//     on from one segment of a run into the next, so that objects pack without a gap at each
//     chunk's end. A class page goes first where other class pages are (segment.nclass), so
//     that small buffers that outlive the large ones around them do not pin the chunks those
//     leave: a heap keeping 300 small buffers among 20 churning large ones held 12 - 14 MiB
//     for them once the large ones were gone, 8 - 10 so (TestLendKeepsClassPagesTogether).
//     A run grows by the chunks right after it when they are free (arena.ReserveNext), and a
//     new run starts with the chunks its first page needs, so that runs hold address space in
//     proportion to what they hold. Each chunk of a run is a segment as any other (registered
//     for lookups, with its slice table), whose pages may begin in the segment before it. A
//     segment of a run that empties gives its chunk's memory to the purge but stays in the
//     run; a run that empties goes back to the arena, but one kept for reuse;
//   - objects up to half a run are object pages (objMax), larger ones huge objects;
//   - a large class (blocks of 64 – 256 KiB) has no page of its own, a segment each: its
//     requests take object pages, which pack with the others (allocObjectClass); a medium
//     class (8 – 64 KiB) takes pages of 2 slices, then 4, then 8 (not 16) as it holds more
//     and makes more between two of PurgeIdle's looks (the fewer of the two), so that a class
//     used a little holds 64 KiB, not 512, and one that makes a page only now and then makes
//     pages of a few blocks, whose free blocks hold less room that no other size can take
//     (newHeap, newClassPage). With pages grown by what a class held alone, on the serving
//     trace's CUDAHost pool (two home shards, each with pages of every class) the medium
//     classes' pages held 8.6 – 9.9 MiB at the peak for 2.7 – 3.7 MiB of buffers; 6.9 so.
//     Pages of 2 slices alone held 4.9 – 6.8 MiB, but a churn of them (footprint/larson-low)
//     made and gave back a page at nearly every allocation and took 6 times as long; pages
//     grown by what a class made alone were larger than before in that churn, which then
//     held 0.5 – 1.3 MiB more, at its end and idle;
//   - a huge object shares its last chunk: the slices past its end are a run of one segment
//     (packTail), where pages go like in any other run, so that a 2.1 MiB object costs its
//     2 MiB and the slices of its tail, not 4 MiB.
//
// Not where a block must lie inside one commit (arena.Joiner: a registration): a page running
// on into the next chunk, and a huge object's last chunk shared with other blocks, would break
// that (Group.packRuns is unset there, and runs are of one chunk).
//
// A huge object with a tail: its segment (segHuge) spans the chunks it fills, and is registered
// for those; the chunk its tail reaches into is a run of one segment whose first pg.nslice
// slices name the huge page, so that an address there finds the huge object (Block and Hold
// take interior addresses) and no page is placed over it. The arena handed out the whole span;
// the heap gives its chunks back in two parts: the huge segment's at the object's drop, the
// tail's when its run empties. Commits touch whole chunks, so the tail's chunk is committed
// with the object and stays so while anything is in it; a kept huge object's range
// (a kept range) ends inside it, so giving the range up gives only the chunks the object fills.
//
// Invariants: a page's slices are named by the slice tables of the segments they lie in, and
// counted in each of those segments' npages; a run's used counts its segments with a page;
// a huge page with a tail has pg.tail's slices [0, pg.nslice) naming it, and its segment's
// span ends where the tail chunk begins.

package heap

import (
	"math/bits"

	"github.com/pinmalloc/pinmalloc/arena"
)

// runChunks is the most chunks a run has (32 MiB, mimalloc's segment).
const runChunks = 16

// runRankShift places, in a rank of run.find, the empty segments a place touches above the
// size of its free run (at most runChunks*segSlices slices).
const runRankShift = 20

// run is adjacent chunks, each a segment, whose pages may run on from one segment into the
// next (see the file's documentation).
type run struct {
	segs  []*segment // one per chunk, in address order
	used  int        // segments holding a page
	owner *Heap      // the heap whose segments they are, whoever's pages they hold (lend.go)
}

// next returns the segment after s in its run, or nil.
func (s *segment) next() *segment {
	if s.run == nil || s.ri+1 >= len(s.run.segs) {
		return nil
	}
	return s.run.segs[s.ri+1]
}

// roomInRuns returns n free slices at a multiple of step (counted from the run's start), across
// segments when across is set: the place, in all the runs, that touches the fewest empty
// segments (whose chunk is not committed), and among those the one in the smallest free run
// (best fit: on the serving trace, eight seeds, the chunks holding a page at the peak fell
// from 1.149 to 1.119 times the peak live bytes against the first place in the runs in order,
// TestPackServing);
// within a segment, the first place in the runs in order that touches no empty segment, else
// the first that touches fewest; a new run when none has room.
func (h *Heap) roomInRuns(n, step int, across bool) (*segment, int, error) {
	h.takeBackReturned() // their slices may be the room
	class := !across
	if !h.g.packRuns {
		across = false
	}
	var best *segment
	bi, least := 0, 1<<30
	for _, r := range h.runs {
		if s, i, cost, ok := r.find(n, step, across, class); ok && cost < least {
			best, bi, least = s, i, cost
			if cost == 0 && !across {
				break // within a segment: the first that fits, as segmentWithRoom does
			}
		}
	}
	if best != nil {
		return best, bi, nil
	}
	// No room: a run grows by the chunks after it, or a new one starts.
	for _, r := range h.runs {
		if s, i, ok := h.growRun(r, n, step, across, class); ok {
			return s, i, nil
		}
	}
	r, err := h.newRun((n + segSlices - 1) / segSlices)
	if err != nil {
		return nil, 0, err
	}
	s, i, _, _ := r.find(n, step, across, class) // its first page fits a fresh run
	return s, i, nil
}

// growRun reserves the chunks right after run r that n slices at a multiple of step need
// (across segments when across is set, from the free slices at the run's end), within
// runChunks, and returns the place when the arena had them free.
func (h *Heap) growRun(r *run, n, step int, across, class bool) (*segment, int, bool) {
	if !h.g.packRuns {
		return nil, 0, false
	}
	last := r.segs[len(r.segs)-1]
	need := n
	if across {
		need = max(n-trailingFree(last.free), 1)
	}
	k := (need + segSlices - 1) / segSlices
	if len(r.segs)+k > runChunks {
		return nil, 0, false
	}
	span, err := h.a.ReserveNext(last.span, k)
	if err != nil {
		return nil, 0, false
	}
	if span.Size != uintptr(k)<<segShift { // a region's last chunk, cut short
		_ = h.a.Free(span)
		return nil, 0, false
	}
	h.extendRun(r, span)
	s, i, _, ok := r.find(n, step, across, class)
	return s, i, ok
}

// cost is what placing a page in segment s of a run costs in memory: 1 for an empty segment,
// whose chunk's memory has gone or goes at the next purge, but one emptied lately, whose memory
// the arena most likely still holds (recent).
func (s *segment) cost() int { return b2i(s.npages == 0 && !s.recent) }

// trailingFree counts the free slices at a segment's end.
func trailingFree(free uint64) int { return bits.LeadingZeros64(^free) }

// newRun takes the chunks of a new run from the arena, reserved, not committed: k of them,
// enough for its first page.
func (h *Heap) newRun(k int) (*run, error) {
	span, err := h.fromArena(h.a.Reserve, uintptr(k)<<segShift, h.g.chunkAlign)
	if err != nil {
		return nil, err
	}
	r := &run{owner: h}
	h.runs = append(h.runs, r)
	h.extendRun(r, span)
	return r, nil
}

// extendRun makes the segments of span, whose chunks the arena handed out right after r's.
func (h *Heap) extendRun(r *run, span arena.Span) {
	for i := range span.N {
		b := span.Base + uintptr(i)<<segShift
		s := &segment{span: arena.Span{Base: b, Size: segSize, ID: span.ID + arena.ChunkID(i), N: 1}, base: b,
			kind: segPacked, run: r, ri: len(r.segs), runOwner: r.owner, free: ^uint64(0), dirtyBits: ^uint64(0), decommit: ^uint64(0)}
		r.segs = append(r.segs, s)
		h.g.register(s)
	}
	h.nsegs += span.N
}

// find returns the place in r of n free slices at a multiple of step, and its rank (lower is
// better). Within one segment (across unset): the first place in a segment that touches the
// fewest empty ones, and for a class page one holding class pages before one holding none,
// ranked by both. Across segments: the place that touches the fewest
// empty segments, and among those the one in the smallest free run (best fit), ranked by both
// (the count above runRankShift); it looks a word of slices at a time.
func (r *run) find(n, step int, across, class bool) (*segment, int, int, bool) {
	var best *segment
	bi, least := 0, 1<<30
	if !across {
		for _, s := range r.segs {
			cost := s.cost() << 1
			if class && s.nclass == 0 {
				cost++ // a class page goes among class pages first
			}
			if cost < least {
				if i, ok := s.findSlices(n, step); ok {
					best, bi, least = s, i, cost
					if cost == 0 {
						break
					}
				}
			}
		}
		return best, bi, least, best != nil
	}
	total := len(r.segs) * segSlices
	hole := 1 << 30
	for a := 0; a < total; {
		// The next free slice from a, then the end of its free run [a, b), a word at a time.
		if w := r.segs[a>>6].free >> uint(a&63); w == 0 {
			a = (a>>6 + 1) << 6
			continue
		} else {
			a += bits.TrailingZeros64(w)
		}
		b := a
		for b < total {
			if w := ^r.segs[b>>6].free >> uint(b&63); w == 0 {
				b = (b>>6 + 1) << 6 // free to the word's end
			} else {
				b += bits.TrailingZeros64(w)
				break
			}
		}
		b = min(b, total)
		start := (a + step - 1) / step * step // the free run's first place
		if start+n <= b {
			cost := 0
			for c := start >> 6; c <= (start+n-1)>>6; c++ {
				cost += r.segs[c].cost()
			}
			if cost < least || cost == least && b-a < hole {
				best, bi, least, hole = r.segs[start>>6], start&63, cost, b-a
			}
		}
		a = b
	}
	return best, bi, least<<runRankShift | min(hole, 1<<runRankShift-1), best != nil
}

// vacateRun follows a page's leaving segment s of a run: a segment left empty gives its
// chunk's memory to the purge (a held heap keeps it committed: see Retention), but is the
// first choice of the next pages while its memory may still be there (recent: until
// PurgeIdle's next look); an empty run goes back to the arena, but the one the heap keeps for
// reuse.
func (h *Heap) vacateRun(s *segment) {
	if s.npages > 0 {
		return
	}
	r := s.run
	r.used--
	if h.hold {
		return
	}
	if h.a.Decommit(s.base, segSize) == nil {
		s.decommit, s.recent = ^uint64(0), true
	}
	if r.used == 0 {
		h.releaseRuns(1)
	}
}

// forgetRecent ends the preference for the runs' segments emptied since the last look: their
// memory is the purge's by the next.
func (h *Heap) forgetRecent() {
	for _, r := range h.runs {
		for _, s := range r.segs {
			s.recent = false
		}
	}
}

// releaseRuns gives back to the arena the empty runs but keep of them (the first ones).
func (h *Heap) releaseRuns(keep int) {
	runs := h.runs[:0]
	for _, r := range h.runs {
		if r.used > 0 || keep > 0 {
			keep -= b2i(r.used == 0)
			runs = append(runs, r)
			continue
		}
		for _, s := range r.segs {
			h.g.unregister(s)
			_ = h.a.Free(s.span) // cannot fail: the chunk is ours and in use
		}
		h.nsegs -= len(r.segs)
	}
	clear(h.runs[len(runs):])
	h.runs = runs
}

// trimRuns gives back to the arena the empty segments of the runs in use, whose address space
// the runs grew into and no longer use (a run keeps a segment that empties, for its next
// pages): a few live blocks spread over a heap's runs would otherwise hold address space that
// another heap needs for a run of its own once the arena has no room left. A run splits where
// it gives segments back: each stretch of segments in use becomes a run of its own (a page
// lies in one stretch, as every segment it touches counts it). Called after releaseRuns, so
// that every run has a segment in use.
func (h *Heap) trimRuns() {
	for _, r := range h.runs[:len(h.runs):len(h.runs)] { // not the runs split off
		segs := r.segs
		if r.used == len(segs) {
			continue
		}
		r.segs, r.used = segs[:0], 0 // the first stretch, in place: s.ri <= i
		cur := r
		for _, s := range segs {
			if s.npages == 0 {
				h.g.unregister(s)
				_ = h.a.Free(s.span) // cannot fail: the chunk is ours and in use
				h.nsegs--
				if cur != nil && len(cur.segs) > 0 {
					cur = nil // the next stretch is a run of its own
				}
				continue
			}
			if cur == nil {
				cur = &run{owner: h}
				h.runs = append(h.runs, cur)
			}
			s.run, s.ri = cur, len(cur.segs)
			cur.segs = append(cur.segs, s)
			cur.used++
		}
		clear(segs[len(r.segs):])
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// packTail gives the chunk that huge page pg's end reaches into, when the object does not fill
// it, to a run of one segment, the object's tail in its first slices.
func (h *Heap) packTail(pg *page) {
	s := pg.seg
	span := s.span
	full := span.Size >> segShift // chunks the object fills
	k := int((span.Size - full<<segShift + sliceSize - 1) >> sliceShift)
	if c, ok := h.a.ChunkBase(span.ID); full == 0 || k == 0 || k == segSlices || int(full)+1 != span.N || !ok || c != span.Base {
		// It fills its last chunk, leaves less than a slice of it, starts inside a chunk, or
		// is smaller than one (an alignment above the chunk's made it huge): its segment would
		// be left with no chunk, and nothing would find it.
		return
	}
	r := &run{owner: h}
	h.runs = append(h.runs, r)
	h.extendRun(r, arena.Span{Base: span.Base + full<<segShift, Size: segSize, ID: span.ID + arena.ChunkID(full), N: 1})
	ts := r.segs[0]
	ts.decommit = 0 // committed with the object: its granule is the object's last
	s.span = arena.Span{Base: span.Base, Size: full << segShift, ID: span.ID, N: int(full)}
	pg.tail, pg.slice0, pg.nslice = ts, 0, int32(k)
	for i := range k {
		ts.pages[i].Store(pg)
	}
	ts.free = ^sliceMask(0, k)
	ts.npages, r.used = 1, 1
	pg.span = full<<segShift + uintptr(k)<<sliceShift // its blocks' reach, and a kept one's capacity
	pg.bsize = pg.span
}

// OwnPageMin returns the smallest request that a heap of g serves with a page of its own (an
// object page or a huge object) rather than with a block of a class page shared with others:
// just above MaxClassSize, or, where memory commits in chunks (the large classes take object
// pages there), just above the largest medium class. Such requests take the heap's blocking
// paths (TryAlloc serves them only from a kept page of about their size), and where memory is
// coarse each heap keeps partly used chunks of its own: a front with several heaps may send
// them all to one, as package pinned does there.
func (g *Group) OwnPageMin() uintptr {
	if g.coarse {
		return largeClassMin
	}
	return MaxClassSize + 1
}

// Coarse reports whether g's memory commits in granules of a chunk or more, so that its heaps
// pack (see the file's documentation).
func (g *Group) Coarse() bool { return g.coarse }

// largeClassMin is the smallest request of a large class.
var largeClassMin = func() uintptr {
	for c, k := range classKind {
		if k == segLarge {
			return uintptr(classSize[c-1]) + 1
		}
	}
	panic("heap: no large class")
}()

// allocObjectClass serves a request of a large class where memory is coarse: an object page,
// or, on a non-blocking path, a kept one as it was left.
func (h *Heap) allocObjectClass(n uintptr) (uintptr, bool, error) {
	if h.noBlock {
		if p, ok := h.tryReuseObject(n); ok {
			return p, false, nil
		}
		return 0, false, errWouldBlock
	}
	return h.allocBig(n, h.align)
}
