package heap

import (
	"testing"
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
	if n := testing.AllocsPerRun(100, func() { _ = h.Usage(); _ = h.Group().Usage() }); n != 0 {
		t.Fatalf("Usage allocates %.1f times per call", n)
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
