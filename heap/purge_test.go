package heap

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// touched is the memory the blocks at ps, of bsize bytes each, touch in granules of g.
func touched(ps []uintptr, bsize, g uintptr) uintptr {
	seen := map[uintptr]bool{}
	for _, p := range ps {
		for q := p &^ (g - 1); q < p+bsize; q += g {
			seen[q] = true
		}
	}
	return uintptr(len(seen)) * g
}

// TestPurgeIdlePage: a page of 40 KiB blocks holding three live ones among many freed gives
// their memory back at the second look of PurgeIdle (the first only sees the page used), and
// the arena's Trim then holds what the live blocks touch; allocating again revives the
// purged blocks with their memory, and the live blocks' contents survive throughout.
func TestPurgeIdlePage(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: -1}, Options{})
	const n = 40 << 10
	var ps []uintptr
	for range 12 {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		clear(mem.Bytes(p, n))
		ps = append(ps, p)
	}
	keep := []uintptr{ps[1], ps[6], ps[9]}
	for i, p := range ps {
		mem.Bytes(p, n)[0] = byte(i)
		if i != 1 && i != 6 && i != 9 {
			if err := h.FreeSized(p, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.a.Trim()
	before := h.a.Usage().Committed
	h.PurgeIdle()
	h.a.Trim()
	if h.a.Usage().Committed != before {
		t.Fatalf("the first look purged: committed %d, then %d", before, h.a.Usage().Committed)
	}
	if pending := h.PurgeIdle(); pending {
		t.Error("an idle heap reports memory pending after its second look")
	}
	h.a.Trim()
	g := h.g.granule
	got, want := h.a.Usage().Committed, uint64(touched(keep, n, g))
	if got != want {
		t.Fatalf("committed after the purge %d, want %d: the granules the three live blocks touch (before %d)", got, want, before)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	for k, i := range []int{1, 6, 9} {
		if b := mem.Bytes(keep[k], n); b[0] != byte(i) {
			t.Fatalf("live block %d lost its contents: %d", i, b[0])
		}
	}
	// Allocating again takes the purged blocks (their memory committed again) and the top.
	var again []uintptr
	for range 9 {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		b := mem.Bytes(p, n)
		for i := range b {
			b[i] = 0x5a // faults if handed out of decommitted memory
		}
		again = append(again, p)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	for _, p := range again {
		if err := h.FreeSized(p, n); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range keep {
		if err := h.FreeSized(p, n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTrimLeavesLive: after a random mix of class blocks, most of them freed, Trim and the
// arena's Trim leave committed no more than the granules the live blocks' slots touch.
func TestTrimLeavesLive(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 256 << 20, PurgeDelay: -1}, Options{})
	r := rand.New(rand.NewPCG(38, 1))
	type blk struct{ p, n, bsize uintptr }
	var live []blk
	for range 20000 {
		n := uintptr(8 + r.IntN(64<<10))
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		pg, _, err := h.g.locate(p)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, blk{p, n, pg.bsize})
		if len(live) > 64 {
			k := r.IntN(len(live))
			if err := h.FreeSized(live[k].p, live[k].n); err != nil {
				t.Fatal(err)
			}
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	h.Trim()
	h.a.Trim()
	g := h.g.granule
	seen := map[uintptr]bool{}
	var sum uintptr
	for _, b := range live {
		for q := b.p &^ (g - 1); q < b.p+b.bsize; q += g {
			seen[q] = true
		}
		sum += b.n
	}
	bound := uint64(len(seen)) * uint64(g)
	if got := h.a.Usage().Committed; got > bound {
		t.Fatalf("committed %d after Trim, above the %d the %d live blocks (%d bytes) touch", got, bound, len(live), sum)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	for _, b := range live {
		if err := h.FreeSized(b.p, b.n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTightCommits: a heap the arena has refused memory commits its pages block by block,
// not slice by slice; its slices stay marked known committed only where they wholly are (a
// slice marked so in part was handed out uncommitted: caught by verify and by the fill).
func TestTightCommits(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 256 << 20, PurgeDelay: -1}, Options{})
	h.tight = true
	r := rand.New(rand.NewPCG(38, 2))
	var ps []uintptr
	var ns []uintptr
	for range 1000 {
		n := uintptr(8 + r.IntN(64<<10))
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		b := mem.Bytes(p, n)
		b[0], b[n-1] = 1, 1 // faults where the block's memory was not committed
		ps, ns = append(ps, p), append(ns, n)
		if len(ps)%200 == 0 {
			if err := h.verify(); err != nil {
				t.Fatal(err)
			}
		}
	}
	pg, _, err := h.g.locate(ps[len(ps)-1])
	if err != nil {
		t.Fatal(err)
	}
	if slack := uintptr(pg.ctop) - uintptr(pg.bump)*pg.bsize; slack >= h.g.granule {
		t.Errorf("a tight page commits %d bytes past its bump index's block, a granule or more", slack)
	}
	for i, p := range ps {
		if err := h.FreeSized(p, ns[i]); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPackRuns: over memory that commits 2 MiB at a time, a 2.5 MiB object is an object page
// of a run that runs on from its first chunk into the next; a 1 MiB buffer then fills the rest
// of that chunk and commits nothing more; an address in the object's second chunk finds the
// object; and the chunk outlives the object's free while the buffer lives (pack.go).
func TestPackRuns(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 64 << 20, PurgeDelay: -1}, Options{})
	if !h.packed || !h.g.packRuns || h.objMax != 16<<20 {
		t.Fatalf("2 MiB granules, no registration: packed %v, runs %v, objects to %d; want objects to 16 MiB", h.packed, h.g.packRuns, h.objMax)
	}
	sharedLastChunk(t, h, 5<<19)
	h.Trim()
	if st := h.Stats(); st.Segments != 0 {
		t.Errorf("%d segments after Trim of an empty heap", st.Segments)
	}
}

// TestPackTail: a huge object (above half a run, 16 MiB) that does not fill its last chunk
// leaves the rest of it to other pages, as an object page of a run does (pack.go).
func TestPackTail(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 64 << 20, PurgeDelay: -1}, Options{})
	sharedLastChunk(t, h, 16<<20+1<<19) // a huge object: 8 chunks, and a quarter of a ninth
}

// TestPackTailSmall: an object smaller than a chunk, made huge by an alignment above the
// chunk's, is not packed: packing it left its segment with no chunk, so the invariants found a
// live block in no page (pinned's TestFakePoolAlignments, under -race, found it).
func TestPackTailSmall(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 64 << 20, PurgeDelay: -1}, Options{})
	p, err := h.AllocAligned(segSize*2/3, 2*segSize)
	if err != nil {
		t.Fatal(err)
	}
	if p%(2*segSize) != 0 {
		t.Errorf("%#x is not aligned to %d", p, 2*segSize)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
}

// sharedLastChunk allocates n bytes (a quarter of a chunk past a whole number of them) and a
// 1 MiB object, and checks that the object lands in the first one's last chunk and commits
// nothing more, that an address in that chunk finds the first one (which the map shows there
// as a page run on from another chunk), and that the chunk outlives the first one's free.
func sharedLastChunk(t *testing.T, h *Heap, n uintptr) {
	t.Helper()
	chunks := (n + segSize - 1) >> segShift
	big, err := h.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.a.Usage().Committed; got != uint64(chunks)<<segShift {
		t.Fatalf("committed %d for %d bytes, want %d chunks", got, n, chunks)
	}
	obj, err := h.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	last := big + (chunks-1)<<segShift
	if obj < big+n || obj >= last+segSize {
		t.Errorf("the 1 MiB object at %#x is not in the last chunk [%#x, %#x) of the first", obj, last, last+segSize)
	}
	if got := h.a.Usage().Committed; got != uint64(chunks)<<segShift {
		t.Errorf("committed %d with the object in the first one's last chunk, want %d chunks", got, chunks)
	}
	if base, size, err := h.g.Block(last + 100); err != nil || base != big || size != n {
		t.Errorf("Block in the last chunk: %#x, %d, %v; want %#x, %d", base, size, err, big, n)
	}
	if err := h.Free(last); err == nil {
		t.Error("a free of an address in the first one's last chunk succeeded")
	}
	if tails := countTails(h); tails != 1 {
		t.Errorf("the map shows %d pages run on from another chunk, want 1", tails)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(big); err != nil {
		t.Fatal(err)
	}
	h.Trim()
	h.a.Trim()
	if got := h.a.Usage().Committed; got != segSize {
		t.Errorf("committed %d with the 1 MiB object live alone, want its 2 MiB chunk", got)
	}
	mem.Bytes(obj, 1<<20)[1<<20-1] = 1 // its chunk is still there
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(obj); err != nil {
		t.Fatal(err)
	}
}

// countTails counts the map's pages run on from another chunk.
func countTails(h *Heap) (n int) {
	for _, cs := range h.g.Map().Chunks {
		for _, c := range cs {
			for _, pi := range c.Pages {
				if pi.Tail {
					n++
				}
			}
		}
	}
	return n
}

// TestPackMediumPages: where memory commits 2 MiB at a time, a medium class's pages grow as
// the class holds and makes more (2, 4, then 8 slices) with no PurgeIdle between, and a class
// of many pages keeps getting pages (its page count once overflowed the shift that sizes them: an
// allocation asked the arena for a page of no slices).
func TestPackMediumPages(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 256 << 20, PurgeDelay: -1}, Options{})
	const n = 60 << 10
	var ps []uintptr
	for range 300 {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	cl := &h.classes[h.class(n)]
	if len(cl.all) < 64 {
		t.Fatalf("%d pages of the class: the test wants more than 64", len(cl.all))
	}
	slices := map[int]int{}
	for _, pg := range cl.all {
		slices[int(pg.nslice)]++
	}
	if slices[2] != 1 || slices[4] != 1 || slices[8] != len(cl.all)-2 {
		t.Errorf("pages by slices %v, want one of 2, one of 4, the rest of 8", slices)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := h.FreeSized(p, n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPackMediumPagesAfterLook: a medium class's next page after one of PurgeIdle's looks is
// of 2 slices again however many pages the class holds, and grows again as the class makes
// more: a class that makes a page only now and then (the serving trace) makes pages of a few
// blocks, whose free blocks hold less room (pack.go).
func TestPackMediumPagesAfterLook(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 256 << 20, PurgeDelay: -1}, Options{})
	const n = 60 << 10
	cl := &h.classes[h.class(n)]
	var ps []uintptr
	// newPages allocates until the class has made k more pages and returns their slices.
	newPages := func(k int) []int {
		var got []int
		for len(got) < k {
			before := len(cl.all)
			p, err := h.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
			if len(cl.all) > before {
				got = append(got, int(cl.all[len(cl.all)-1].nslice))
			}
		}
		return got
	}
	if got := newPages(3); !slices.Equal(got, []int{2, 4, 8}) {
		t.Fatalf("first pages of %v slices, want 2, 4, 8", got)
	}
	h.PurgeIdle()
	if got := newPages(3); !slices.Equal(got, []int{2, 4, 8}) {
		t.Errorf("pages after a look of %v slices, want 2, 4, 8", got)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if err := h.FreeSized(p, n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestIdleCurrentPageGoesBack: a class's current page left empty and idle is given back whole
// by PurgeIdle, not purged in place: purged to nothing, it had no block at hand, the next
// allocation passed it over for another page, and no free ever came to move it, so Close
// freed every chunk but its segment's (the serving trace, paced, found it: an arena closed with
// a chunk in use).
func TestIdleCurrentPageGoesBack(t *testing.T) {
	// Its cleanup closes the heap and then the arena, which fails with a chunk in use.
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: -1}, Options{})
	const n = 20 << 10 // a medium class: no spare page
	p, err := h.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	c := h.class(n)
	cur := h.cur[c]
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	h.PurgeIdle()
	h.PurgeIdle() // the current page, empty and idle
	if !cur.dead || h.cur[c] != &h.classes[c].empty {
		t.Fatalf("the idle empty current page: dead %v, still current %v", cur.dead, h.cur[c] == cur)
	}
	if _, err := h.newClassPage(c); err != nil { // a page ahead on the available list, as before
		t.Fatal(err)
	}
	if p, err = h.Alloc(n); err != nil {
		t.Fatal(err)
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
}
