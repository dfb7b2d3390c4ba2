package heap

import (
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestPurgeEdges fills a page of every size class, frees a pattern of its blocks (all but the
// last, all but the first, every other one, those that end on a granule boundary, a random
// half), trims the heap and the arena, and checks that the live blocks kept their bytes and
// their memory, that no more stays committed than the granules they touch, and that
// allocating the freed blocks again (half of them with Zalloc, which must read zero) hands out
// committed memory: the purge's arithmetic at a page's last block and at granule edges, for
// host pages of 4 KiB and 16 KiB (arm64 kernels), in a heap that commits slice by slice and in
// one that commits block by block (tight, as after a refused commit). Under the race detector it
// skips: one goroutine's arithmetic, no purger running (PurgeDelay -1); the non-race runs hold it.
func TestPurgeEdges(t *testing.T) {
	if raceEnabled {
		t.Skip("one goroutine's purge arithmetic with no purger running: nothing for the race detector; the non-race runs (default and PINMALLOC_LONG) hold it")
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for _, granule := range []uintptr{4 << 10, 16 << 10} {
		prov := newGranuleProvider(granule)
		a, err := arena.New(arena.Options{Provider: prov, Capacity: 64 << 20, PurgeDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		g, err := NewGroup(a)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(uint64(granule), 3))
		for _, tight := range []bool{false, true} {
			for c := range numClasses {
				for pat := range 5 {
					t.Run(fmt.Sprintf("granule=%d/tight=%v/class=%d/pattern=%d", granule, tight, classSize[c], pat), func(t *testing.T) {
						purgeEdge(t, g, prov, granule, tight, c, pat, r)
					})
				}
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func purgeEdge(t *testing.T, g *Group, prov *granuleProvider, gr uintptr, tight bool, c, pat int, r *rand.Rand) {
	h, err := g.NewHeap(Options{Align: 16})
	if err != nil {
		t.Fatal(err)
	}
	h.tight = tight // as after a refused commit: pages commit block by block (extend, revive)
	n, nb := uintptr(classSize[c]), int(classBlocks[c])
	var bs []liveBlock
	for i := range nb {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		b := liveBlock{p, n, byte(i)}
		fill(b, false)
		bs = append(bs, b)
	}
	slices.SortFunc(bs, func(x, y liveBlock) int { return int(x.p) - int(y.p) })
	var live, freed []liveBlock
	for i, b := range bs {
		var free bool
		switch pat {
		case 0:
			free = i != nb-1
		case 1:
			free = i != 0
		case 2:
			free = i%2 == 1
		case 3: // a block that ends on a granule boundary, and the one after it
			end := (b.p + n) % gr
			free = end == 0 || (i > 0 && (bs[i-1].p+n)%gr == 0)
		default:
			free = r.IntN(2) == 0
		}
		if free {
			if err := h.FreeSized(b.p, b.n); err != nil {
				t.Fatal(err)
			}
			freed = append(freed, b)
		} else {
			live = append(live, b)
		}
	}
	h.Trim()
	h.a.Trim()
	touched := map[uintptr]bool{}
	for _, b := range live {
		if bad := fill(b, true); bad > 0 {
			t.Fatalf("live block [%#x, +%d) lost %d bytes to the purge", b.p, b.n, bad)
		}
		if q, bad := prov.uncommitted(b.p, b.n); bad {
			t.Fatalf("live block [%#x, +%d): page %#x uncommitted", b.p, b.n, q)
		}
		for q := b.p &^ (gr - 1); q < b.p+b.n; q += gr {
			touched[q] = true
		}
	}
	if got, bound := h.a.Usage().Committed, uint64(len(touched))*uint64(gr); got > bound {
		t.Errorf("committed %d after Trim, above the %d the %d live blocks touch", got, bound, len(live))
	}
	if err := h.verify(); err != nil {
		t.Fatal(err)
	}
	// The freed blocks again: revived, or above the bump index.
	for i := range freed {
		var p uintptr
		if i%2 == 0 {
			p, err = h.Zalloc(n)
			if err == nil {
				for j, v := range mem.Bytes(p, n) {
					if v != 0 {
						t.Fatalf("Zalloc %d = %#x: byte %d is %#x", n, p, j, v)
					}
				}
			}
		} else {
			p, err = h.Alloc(n)
		}
		if err != nil {
			t.Fatal(err)
		}
		if q, bad := prov.uncommitted(p, n); bad {
			t.Fatalf("block [%#x, +%d) handed out again: page %#x uncommitted", p, n, q)
		}
		b := liveBlock{p, n, byte(i + 7)}
		fill(b, false)
		live = append(live, b)
	}
	for _, b := range live {
		if bad := fill(b, true); bad > 0 {
			t.Fatalf("block [%#x, +%d) lost %d bytes", b.p, b.n, bad)
		}
		if err := h.FreeSized(b.p, b.n); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}
