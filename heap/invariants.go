package heap

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// verify checks the invariants of the package documentation, and the bookkeeping that rests on
// them, over everything the heap holds. The owner calls it, with no free of its blocks in
// flight on other goroutines (a remote free half done is seen as an inconsistency). It costs a
// walk of every page, so the heap calls it only when internal/invariants.Enabled (the tag
// invariants, or -race; see checkInvariants); the property and fuzz tests call it after their
// operations.
func (h *Heap) verify() error { return h.verifyWith(true) }

// verifyWith is verify, with the check of the group's lookup tables against each other only
// when tables is set: that check reads what every heap of the group registers, so the owner of
// one heap cannot run it while the others' owners work (checkInvariants runs it only for a
// group of one heap).
func (h *Heap) verifyWith(tables bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	var liveN uint64
	var liveBytes uintptr
	var pages []*page // the heap's live pages, for verifyPending
	kept, err := h.verifyKept()
	if err != nil {
		errs = append(errs, err)
	}
	object := func(pg *page) { // an object page or huge object of the heap's segments
		pages = append(pages, pg)
		n, bytes := pg.objectLive()
		liveN += n
		liveBytes += bytes
		if err := pg.verifyExtent(); err != nil {
			errs = append(errs, err)
		}
		if !kept[pg] { // kept ones: verifyKept
			if err := h.verifyObject(pg, false); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for i := range h.direct {
		if c := h.class(uintptr(max(i, 1)) * 16); h.direct[i] != h.cur[c] {
			bad("direct[%d] is not the current page of class %d", i, c)
		}
	}
	for c := range h.classes {
		cl := &h.classes[c]
		if cur := h.cur[c]; cur != &cl.empty && (cur.class != int16(c) || cur.dead || cur.heap != h) {
			bad("class %d: current page is of class %d (dead %v)", c, cur.class, cur.dead)
		}
		if sp := cl.spare; sp != nil && (!sp.avail.Linked() || !sp.empty() || sp == h.cur[c] || cl.kind != segSmall || sp.class != int16(c)) {
			bad("class %d: spare page %#x is not an empty small page of the class on its available list, other than the current one", c, sp.base)
		}
		for pg := cl.avail.Front(); pg != nil; pg = pg.avail.Next() {
			if !cl.avail.Contains(&pg.avail) || pg.class != int16(c) || pg.dead || int(pg.allIdx) >= len(cl.all) || cl.all[pg.allIdx] != pg {
				bad("class %d: page %#x on the available list is not a live page of the class", c, pg.base)
			}
		}
		pages = append(pages, cl.all...)
		for i, pg := range cl.all {
			if int(pg.allIdx) != i || pg.class != int16(c) || pg.dead || pg.heap != h {
				bad("class %d: page %#x at %d of the class's pages (index %d, class %d, dead %v)", c, pg.base, i, pg.allIdx, pg.class, pg.dead)
				continue
			}
			if want := h.alertOf(pg); pg.alert != want {
				bad("class %d: page %#x has alert %d, want %d (on the list %v, current %v, bump %d)",
					c, pg.base, pg.alert, want, pg.avail.Linked(), h.cur[c] == pg, pg.bump)
			}
			if h.lent(pg) != nil && (uintptr(pg.ctop) != uintptr(pg.nslice)<<sliceShift || pg.limit != pg.nblocks) {
				bad("class %d: borrowed page %#x is not committed whole (ctop %d, limit %d of %d)", c, pg.base, pg.ctop, pg.limit, pg.nblocks)
			}
			n, bytes, err := pg.verifyBlocks()
			if err != nil {
				bad("class %d: %w", c, err)
			}
			liveN += n
			liveBytes += bytes
		}
	}
	for i, e := range h.near {
		pg := e.pg
		if e.span == 0 {
			continue
		}
		covers := false
		for s := pg.base >> sliceShift; s <= (pg.base+pg.span-1)>>sliceShift; s++ {
			covers = covers || s&(nearLen-1) == uintptr(i)
		}
		if pg.dead || pg.heap != h || pg.class < 0 || !covers || e.base != pg.base || uintptr(e.span) != pg.span || uintptr(e.bsize) != pg.bsize || e.divMul != pg.divMul {
			bad("page cache entry %d names page %#x (dead %v, class %d, another heap's %v, covers %v)", i, pg.base, pg.dead, pg.class, pg.heap != h, covers)
		}
	}
	segs, err := h.g.verifyTables(tables)
	if err != nil {
		errs = append(errs, err)
	}
	nsegs, nhuge := len(h.spares), 0 // spares are out of the tables, and counted
	for _, s := range segs {
		if s.owner() != h {
			continue // another heap's: its owner may be changing it now
		}
		if s.huge != nil {
			nhuge++
		} else {
			nsegs++
		}
		pg := s.huge
		if pg == nil {
			if err := h.verifyKnownCommitted(s); err != nil {
				errs = append(errs, err)
			}
			seen := map[*page]bool{}
			nclass := 0
			for i := range s.pages {
				p := s.pages[i].Load()
				if (p == nil) != (s.free>>uint(i)&1 == 1) {
					bad("segment %#x: slice %d has page %v but free bit %d", s.base, i, p != nil, s.free>>uint(i)&1)
				}
				if p != nil && p.class < 0 && !seen[p] && p.heap == h && p.seg == s { // a huge tail counts in its own segment
					object(p)
				}
				if p != nil && p.class >= 0 && !seen[p] {
					nclass++
				}
				seen[p] = true
			}
			delete(seen, nil)
			if len(seen) != s.npages || nclass != s.nclass {
				bad("segment %#x: %d pages counted, %d found; %d class pages counted, %d found", s.base, s.npages, len(seen), s.nclass, nclass)
			}
		} else if pg.heap == h {
			object(pg)
			if ts := pg.tail; ts != nil {
				if ts.base != s.base+s.span.Size || pg.nslice <= 0 || pg.nslice >= segSlices || pg.span != s.span.Size+uintptr(pg.nslice)<<sliceShift {
					bad("huge object %#x: its tail segment %#x, %d slices, span %d, is not where its chunks end (%d bytes)", pg.base, ts.base, pg.nslice, pg.span, s.span.Size)
				}
				for i := range pg.nslice {
					if ts.pages[i].Load() != pg {
						bad("huge object %#x: slice %d of its tail does not name it", pg.base, i)
					}
				}
			}
		}
	}
	if err := h.verifyRoom(segs); err != nil {
		errs = append(errs, err)
	}
	for _, r := range h.runs {
		used := 0
		for i, s := range r.segs {
			if s.run != r || s.ri != i || s.runOwner != r.owner || s.base != r.segs[0].base+uintptr(i)<<segShift || s.kind != segPacked || len(r.segs) > runChunks {
				bad("run %#x: segment %d (%#x) is not its chunk %d of %d", r.segs[0].base, i, s.base, i, len(r.segs))
			}
			if s.npages > 0 {
				used++
			}
		}
		if used != r.used {
			bad("run %#x: %d segments hold pages, it counts %d", r.segs[0].base, used, r.used)
		}
	}
	if err := h.verifyPending(pages); err != nil {
		errs = append(errs, err)
	}
	for _, pg := range pages {
		// No sharer is at work (see verifyQuiet): one left a page sharing, and every later
		// sharer would wait for it for good. Object pages are shared from the start.
		if m := atomic.LoadUint32(&pg.mode); m == sharing || pg.class < 0 && m != shared {
			bad("page %#x (class %d) is in mode %d with no sharer at work", pg.base, pg.class, m)
		} else if m == exclusive && pg.holdSeen.seen() { // the invariants build's record
			bad("page %#x is exclusive, yet one of its blocks was held", pg.base)
		}
	}
	if err := h.verifyUncleared(); err != nil {
		errs = append(errs, err)
	}
	if nsegs != h.nsegs || nhuge != h.nhuge {
		bad("heap counts %d segments and %d huge objects, the tables hold %d and %d", h.nsegs, h.nhuge, nsegs, nhuge)
	}
	if liveN != h.allocs-h.frees || liveBytes != h.live {
		bad("heap counts %d blocks of %d bytes live, its pages %d of %d", h.allocs-h.frees, h.live, liveN, liveBytes)
	}
	return errors.Join(errs...)
}

// verifyRoom checks the heap's lists of segments with room (Heap.segs): a segment of its own
// outside the runs (segs, the group's tables' segments) is on its kind's list exactly while it
// has a free slice, and every segment on a list is such a segment, of the list's kind. A
// segment missing from its list holds room no page takes again until it empties; one on a
// list but out of the tables (given back to the arena, or a spare) would take pages in
// memory that is not the heap's.
func (h *Heap) verifyRoom(segs []*segment) error {
	var errs []error
	own := map[*segment]bool{}
	for _, s := range segs {
		if s.owner() != h || s.huge != nil || s.run != nil {
			continue // another heap's (its owner may be changing it now), a huge object, a run's
		}
		own[s] = true
		if s.room.Linked() != (s.free != 0) {
			errs = append(errs, fmt.Errorf("segment %#x (kind %d): free slices %#x, on its list "+
				"of segments with room %v", s.base, s.kind, s.free, s.room.Linked()))
		}
	}
	for k := range h.segs {
		for s := h.segs[k].Front(); s != nil; s = s.room.Next() {
			if !own[s] || s.kind != segKind(k) || !h.segs[k].Contains(&s.room) {
				errs = append(errs, fmt.Errorf("segment %#x (kind %d) on the list of segments "+
					"with room of kind %d is not one of the heap's of that kind in the tables",
					s.base, s.kind, k))
			}
		}
	}
	return errors.Join(errs...)
}

// verifyKnownCommitted checks that the slices segment s marks known committed (decommit
// clear) are wanted by the arena, but those of a kept object page, which the arena gives up
// without telling the heap (the page's reuse finds out: allocBig).
func (h *Heap) verifyKnownCommitted(s *segment) error {
	known := ^s.decommit
	for i := 0; i < segSlices; i++ {
		if p := s.pages[i].Load(); p != nil && p.class < 0 && p.tracked {
			known &^= 1 << uint(i)
		}
	}
	for known != 0 {
		first := bits.TrailingZeros64(known)
		n := bits.TrailingZeros64(^(known >> uint(first)))
		if !h.a.Wanted(s.base+uintptr(first)<<sliceShift, uintptr(n)<<sliceShift) {
			return fmt.Errorf("segment %#x: slices [%d, %d) are marked known committed, yet the arena does not count them all wanted", s.base, first, first+n)
		}
		known &^= sliceMask(first, n)
	}
	return nil
}

// owner returns the heap whose pages segment s holds (nil: none), reading only what other
// goroutines may read: the page table's atomic entries and a page's heap, fixed at its making.
func (s *segment) owner() *Heap {
	if s.runOwner != nil {
		return s.runOwner // its pages may be borrowed (lend.go)
	}
	if s.huge != nil {
		return s.huge.heap
	}
	for i := range s.pages {
		if p := s.pages[i].Load(); p != nil {
			return p.heap
		}
	}
	return nil
}

// verifyBlocks checks a class page's blocks: each index below the bump index is live, on the
// free list or freed remotely (once), and none above it is handed out; the free list holds
// nfree blocks, each once, each a link word (freeLink), and no other word is one. It returns
// the blocks the heap still counts live (remote frees not yet collected included) and their
// bytes.
func (pg *page) verifyBlocks() (n uint64, bytes uintptr, err error) {
	if pg.nfree+pg.npurged > pg.bump || pg.bump > pg.limit || pg.limit > pg.nblocks ||
		pg.limit != min(uint32(uintptr(pg.ctop)/pg.bsize), pg.nblocks) || uintptr(pg.ctop) > uintptr(pg.nslice)<<sliceShift {
		return 0, 0, fmt.Errorf("page %#x: nfree %d, npurged %d, bump %d, limit %d, nblocks %d, ctop %d", pg.base, pg.nfree, pg.npurged, pg.bump, pg.limit, pg.nblocks, pg.ctop)
	}
	onList := make([]bool, pg.nblocks)
	for i, idx := uint32(0), pg.head; i < pg.nfree+pg.npurged; i++ {
		if idx >= pg.bump {
			return 0, 0, fmt.Errorf("page %#x: free list holds block %d, not below the bump index %d", pg.base, idx, pg.bump)
		}
		st := atomic.LoadUint32(&pg.state[idx])
		if onList[idx] || !isLink(st) {
			return 0, 0, fmt.Errorf("page %#x: free list holds block %d (state %#x) twice or not free", pg.base, idx, st)
		}
		onList[idx] = true
		idx = st &^ freeLink
	}
	excl := atomic.LoadUint32(&pg.mode) == exclusive
	for idx := uint32(0); idx < pg.nblocks; idx++ {
		st := atomic.LoadUint32(&pg.state[idx])
		remote := pg.remote[idx>>6].Load()>>(idx&63)&1 == 1
		switch {
		case isLink(st) && !onList[idx]:
			return 0, 0, fmt.Errorf("page %#x: block %d has a free-list word %#x but is not on the list", pg.base, idx, st)
		case onList[idx] && remote:
			return 0, 0, fmt.Errorf("page %#x: block %d is on the free list and marked remotely freed", pg.base, idx)
		case onList[idx]:
		case excl && (remote || st&freedRemote != 0): // held is the owner's (holdExcl)
			return 0, 0, fmt.Errorf("page %#x is exclusive, yet block %d (state %#x) was touched by another goroutine", pg.base, idx, st)
		case idx >= pg.bump && (st != 0 || remote):
			return 0, 0, fmt.Errorf("page %#x: block %d past the bump index has state %#x", pg.base, idx, st)
		case remote && st&freedRemote == 0:
			return 0, 0, fmt.Errorf("page %#x: block %d marked remotely freed has state %#x", pg.base, idx, st)
		case idx < pg.bump:
			if st == 0 || st&freedRemote != 0 && !remote {
				return 0, 0, fmt.Errorf("page %#x: block %d (state %#x) is lost: not live, not on the free list, not to collect", pg.base, idx, st)
			}
			n++
			bytes += uintptr(st &^ (freedRemote | held))
		}
	}
	if n != uint64(pg.bump-pg.nfree-pg.npurged) {
		return 0, 0, fmt.Errorf("page %#x: %d blocks held, bump - nfree - npurged = %d", pg.base, n, pg.bump-pg.nfree-pg.npurged)
	}
	return n, bytes, pg.verifyCommitted(onList)
}

// verifyCommitted checks the memory of class page pg (purge.go): every block but the purged
// ones (the free list's blocks past its first nfree) touches only granules below ctop that the
// page has not given up and the arena counts wanted; the page gave up none at or above ctop,
// and a slice holding a granule it gave up is marked not known committed. onList marks the
// blocks on the free list.
func (pg *page) verifyCommitted(onList []bool) error {
	g := pg.heap.g.granule
	if pg.gone != nil {
		top := int((uintptr(pg.ctop) + g - 1) / g)
		if k := pg.gone.Count(top, int(uintptr(pg.nslice)<<sliceShift/g)); k != 0 {
			return fmt.Errorf("page %#x: %d granules given up at or above ctop %d", pg.base, k, pg.ctop)
		}
		if err := pg.gone.Runs(0, top, true, func(s, e int) error {
			lo := pg.base + uintptr(s)*g
			if m := pg.seg.slicesOf(lo, lo+uintptr(e-s)*g); pg.seg.decommit&m != m {
				return fmt.Errorf("page %#x: granules [%d, %d) given up in slices known committed (%#x of %#x)", pg.base, s, e, pg.seg.decommit&m, m)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	purged := make([]bool, pg.nblocks)
	for i, idx := uint32(0), pg.head; i < pg.nfree+pg.npurged; i++ {
		purged[idx] = i >= pg.nfree
		idx = atomic.LoadUint32(&pg.state[idx]) &^ freeLink
	}
	// The runs of blocks that must be committed, merged, each checked once with the arena.
	var lo, hi uintptr
	flush := func() error {
		if hi > lo && !pg.heap.a.Wanted(pg.base+lo, hi-lo) {
			return fmt.Errorf("page %#x: [%d, %d) holds blocks in use or free at hand, yet the arena does not count it wanted", pg.base, lo, hi)
		}
		lo, hi = 0, 0
		return nil
	}
	for idx := uint32(0); idx < pg.limit; idx++ {
		if purged[idx] {
			continue
		}
		b := uintptr(idx) * pg.bsize
		if b+pg.bsize > uintptr(pg.ctop) || pg.touchesGone(idx, g) {
			return fmt.Errorf("page %#x: block %d (on the list %v) lies in memory the page gave up or never committed (ctop %d)", pg.base, idx, onList[idx], pg.ctop)
		}
		if b != hi {
			if err := flush(); err != nil {
				return err
			}
			lo = b
		}
		hi = b + pg.bsize
	}
	return flush()
}

// objectLive returns what the heap counts live of an object or huge page: its block, unless
// it is free (a kept page) or freed and collected.
func (pg *page) objectLive() (uint64, uintptr) {
	st := atomic.LoadUint32(&pg.state[0])
	if st == 0 || st&freedRemote != 0 && pg.remote[0].Load() == 0 {
		return 0, 0
	}
	return 1, pg.objSize.Load()
}

// verifyExtent checks that the block of object or huge page pg, when live, lies to its extent
// (Group.Extent) in memory the arena counts committed and wanted.
func (pg *page) verifyExtent() error {
	if st := atomic.LoadUint32(&pg.state[0]); st == 0 || st&freedRemote != 0 {
		return nil
	}
	if ext := pg.extent(); ext < pg.objSize.Load() || !pg.heap.a.Wanted(pg.base, ext) {
		return fmt.Errorf("object %#x of %d bytes: its extent of %d bytes is not all committed and wanted", pg.base, pg.objSize.Load(), ext)
	}
	return nil
}

// verifyTablesMidway, when set (by a test), runs between verifyTables' read of the chunk table
// and its read of the address table: where another goroutine may change them.
var verifyTablesMidway func()

// verifyTables checks that the address table and the chunk table agree: every segment the
// chunk table holds is found by the address table at its first and last byte, unless its slot
// is crowded or beyond the directory, and the address table holds no segment the chunk table
// does not. It returns the segments, each once; without check it only lists them.
func (g *Group) verifyTables(check bool) ([]*segment, error) {
	var segs []*segment
	held := map[*segment]bool{}
	for d := range g.dir {
		l := g.dir[d].Load()
		if l == nil {
			continue
		}
		for i := range l {
			if s := l[i].Load(); s != nil && !held[s] {
				held[s] = true
				segs = append(segs, s)
			}
		}
	}
	if !check {
		return segs, nil
	}
	if verifyTablesMidway != nil {
		verifyTablesMidway()
	}
	var errs []error
	for _, s := range segs {
		for _, p := range []uintptr{s.base, s.base + s.span.Size - 1} {
			if f := g.segmentOf(p); f != nil && f != s {
				errs = append(errs, fmt.Errorf("address %#x: the address table says segment %#x, the chunk table %#x", p, f.base, s.base))
			}
		}
	}
	for d := range g.addr {
		l := g.addr[d].Load()
		if l == nil {
			continue
		}
		for i := range l {
			for _, s := range []*segment{l[i].lo.Load(), l[i].hi.Load()} {
				if s != nil && !held[s] {
					errs = append(errs, fmt.Errorf("the address table holds segment %#x, which the chunk table does not", s.base))
				}
			}
		}
	}
	return segs, errors.Join(errs...)
}

// checkInvariants panics when verify finds a broken invariant, when internal/invariants says a
// check is due: at every call with the tag invariants, one call in invariants.RaceEvery under
// -race alone (see invariants.Due); otherwise it does nothing and costs nothing.
//
// verify reads a remote free or a hold that another goroutine has half done as a broken
// invariant, so the walk runs only when none is under way in the group, and its verdict counts
// only when none began meanwhile (the group counts them: foreignBegun, foreignEnded). A pool
// whose buffers are freed from many goroutines (pinned) is checked between their frees.
func (h *Heap) checkInvariants(where string) {
	if !invariants.Due(&h.checks) {
		return
	}
	if err := h.verifyQuiet(); err != nil {
		panic(fmt.Sprintf("heap: invariant broken after %s: %v", where, err))
	}
}

// verifyQuiet is verify when no other goroutine changes the group's pages during the walk, and
// nil (no verdict) when one did or was doing so (see checkInvariants).
func (h *Heap) verifyQuiet() error {
	g := h.g
	ended := g.foreignEnded.Load()
	if g.foreignBegun.Load() != ended {
		return nil
	}
	alone := g.nheaps.Load() == 1
	err := h.verifyWith(alone)
	if g.foreignBegun.Load() != ended {
		return nil
	}
	if alone && g.nheaps.Load() != 1 {
		// A heap made during the walk (a pool's shard, on a P that allocated for the first
		// time) registered its segments in the group's tables while they were read: the cross
		// check of the tables saw half of it. Heaps are never unmade, so a count still 1 after
		// the walk says no other heap touched the tables during it.
		return nil
	}
	return err
}
