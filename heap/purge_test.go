package heap

import (
	"math/rand/v2"
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
	h := newTestHeapOn(t, arena.Options{Provider: arena.Pageable(arena.HostOptions{}), Capacity: 64 << 20, PurgeDelay: -1}, Options{})
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
	h := newTestHeapOn(t, arena.Options{Provider: arena.Pageable(arena.HostOptions{}), Capacity: 256 << 20, PurgeDelay: -1}, Options{})
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
	h := newTestHeapOn(t, arena.Options{Provider: arena.Pageable(arena.HostOptions{}), Capacity: 256 << 20, PurgeDelay: -1}, Options{})
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
