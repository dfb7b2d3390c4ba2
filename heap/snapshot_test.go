package heap

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

func TestUsageAndSnapshot(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	var ps []uintptr
	sizes := []uintptr{16, 1000, 9000, 100 << 10, 300 << 10, 3 << 20}
	var want uint64
	for _, n := range sizes {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
		want += uint64(n)
	}
	u := h.Usage()
	if u.Live != uint64(len(sizes)) || u.InUse != want || u.Peak != want || u.Committed != h.a.Stats().Committed {
		t.Fatalf("Usage %+v, want %d live, %d bytes", u, len(sizes), want)
	}
	if gu := h.Group().Usage(); gu.Committed != u.Committed || gu.Reserved == 0 || gu.InUseChunks != 6 {
		t.Fatalf("group usage %+v", gu)
	}
	if !invariants.Enabled { // the invariant checks that Collect runs allocate
		if n := testing.AllocsPerRun(100, func() { _ = h.Usage(); _ = h.Group().Usage() }); n != 0 {
			t.Fatalf("Usage allocates %.1f times per call", n)
		}
	}

	// A remote free is seen by the map at once, and collected by Usage.
	if err := h.Group().Free(ps[0]); err != nil {
		t.Fatal(err)
	}
	m := h.Group().Map()
	kinds := map[ChunkKind]int{}
	live := 0
	for _, c := range m.Chunks[0] {
		kinds[c.Kind]++
		for _, pg := range c.Pages {
			live += pg.Live
			if pg.Live > pg.Blocks || pg.Slices <= 0 {
				t.Errorf("page %+v", pg)
			}
		}
		if c.HugeFirst && c.HugeSize == 3<<20 && c.HugeChunks == 2 {
			live++
		}
	}
	if live != len(sizes)-1 || kinds[ChunkSmall] != 1 || kinds[ChunkMedium] != 1 || kinds[ChunkLarge] != 1 || kinds[ChunkObject] != 1 || kinds[ChunkHuge] != 2 {
		t.Errorf("map: kinds %v, live %d", kinds, live)
	}
	var blocks []Block
	h.Group().Blocks(func(b Block) bool { blocks = append(blocks, b); return true })
	if len(blocks) != len(sizes)-1 {
		t.Fatalf("%d blocks, want %d: %+v", len(blocks), len(sizes)-1, blocks)
	}
	for i, b := range blocks {
		if b.BlockSize < b.Size || (i > 0 && b.Addr <= blocks[i-1].Addr) {
			t.Errorf("block %d: %+v", i, b)
		}
	}
	n := 0
	h.Group().Blocks(func(Block) bool { n++; return n < 2 })
	if n != 2 {
		t.Errorf("Blocks went on after f returned false: %d calls", n)
	}
	if u := h.Usage(); u.Live != uint64(len(sizes)-1) || u.InUse != want-16 {
		t.Errorf("after a remote free: %+v", u)
	}
	for _, p := range ps[1:] {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	if ChunkHuge.String() != "huge" || ChunkKind(99).String() != "unknown" {
		t.Error("ChunkKind.String")
	}
}

// TestBlocksFrom walks a heap's blocks in batches of several sizes: the batches together are
// the blocks Blocks lists, in its order, and no batch goes past the page on which it reached
// its size. Blocks freed between two batches are not listed after they are freed.
func TestBlocksFrom(t *testing.T) {
	h := newTestHeap(t, 256<<20, Options{})
	var ps []uintptr
	for i := range 3000 {
		n := []uintptr{16, 100, 1000, 9000, 100 << 10, 300 << 10, 3 << 20}[i%7]
		if i%7 >= 4 && i > 200 {
			continue // a few big ones
		}
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	g := h.Group()
	var all []Block
	g.Blocks(func(b Block) bool { all = append(all, b); return true })
	if len(all) != len(ps) {
		t.Fatalf("Blocks lists %d of %d", len(all), len(ps))
	}
	for _, max := range []int{1, 2, 7, 100, 1 << 20} {
		var got []Block
		var c BlockCursor
		calls := 0
		for done := false; !done; calls++ {
			var batch []Block
			done = g.BlocksFrom(&c, max, func(b Block) { batch = append(batch, b) })
			if len(batch) > max+int(segSize/16) {
				t.Fatalf("max %d: a batch of %d blocks", max, len(batch))
			}
			got = append(got, batch...)
		}
		if len(got) != len(all) {
			t.Fatalf("max %d: %d blocks in %d batches, want %d", max, len(got), calls, len(all))
		}
		for i := range got {
			if got[i] != all[i] {
				t.Fatalf("max %d: block %d is %+v, want %+v", max, i, got[i], all[i])
			}
		}
		if max == 1 && calls < len(all)/100 {
			t.Errorf("max 1: %d batches for %d blocks", calls, len(all))
		}
	}
	// Free everything after the first batch: the rest of the walk finds nothing more.
	var c BlockCursor
	first := 0
	g.BlocksFrom(&c, 10, func(Block) { first++ })
	for _, p := range ps {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	rest := 0
	for !g.BlocksFrom(&c, 10, func(Block) { rest++ }) {
	}
	if first < 10 || rest != 0 {
		t.Errorf("first batch %d blocks, %d after everything was freed", first, rest)
	}
}
