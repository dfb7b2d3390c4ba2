package heap

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// checkLookup fails unless the address table agrees with the chunk table about p: where it
// answers at all, it names the segment the arena's regions and the chunk table name.
func checkLookup(t testing.TB, g *Group, p uintptr) {
	t.Helper()
	slow, err := g.segmentSlow(p)
	if fast := g.segmentOf(p); fast != nil && (err != nil || fast != slow) {
		t.Fatalf("%#x: address table says segment %#x, chunk table %v (%v)", p, fast.base, slow, err)
	}
}

// TestAddressTableUnaligned runs the address table over a region whose chunks straddle 2 MiB
// boundaries, so that every chunk is the hi segment of one slot and the lo of the next: every
// block, its last byte and the byte past it are found as the chunk table finds them, and a
// block in the middle of a slot is found by the fast table itself.
func TestAddressTableUnaligned(t *testing.T) {
	backing := make([]byte, 72<<20)
	start := mem.Addr(backing) + 1<<20 + (4096 - mem.Addr(backing)%4096) // page-aligned, mid-slot
	prov, err := arena.External(arena.ExternalRegion{Base: start, Size: 64 << 20, Kind: arena.HostPageable, Committed: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { runtime.KeepAlive(backing) }) // runs last: after the arena's Close
	h := newTestHeapOn(t, arena.Options{Provider: prov}, Options{})
	var ps []uintptr
	fast := 0
	for i, n := range []uintptr{64, 8 << 10, 40 << 10, 200 << 10, 700 << 10, 3 << 20, 64, 5 << 20} {
		for range 2 + i%2 {
			p, err := h.Alloc(n)
			if err != nil {
				t.Fatalf("Alloc(%d): %v", n, err)
			}
			ps = append(ps, p)
			for _, q := range []uintptr{p, p + n - 1, p + n} {
				checkLookup(t, h.g, q)
			}
			if h.g.segmentOf(p) != nil {
				fast++
			}
			if err := h.FreeSized(p+1, n); err == nil {
				t.Fatalf("freed an interior pointer")
			}
		}
	}
	if fast != len(ps) {
		t.Errorf("the address table found %d of %d blocks; it should find every one", fast, len(ps))
	}
	for _, p := range ps {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
		checkLookup(t, h.g, p)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAddressTableCrowded registers three segments in one slot, as two region ends inside 2 MiB
// would: the third is left to the chunk table, and unregistering takes out only what was put in.
func TestAddressTableCrowded(t *testing.T) {
	g := &Group{addr: make([]atomic.Pointer[addrLeaf], addrDirLen)}
	const x = 64 << 30 // a slot boundary
	seg := func(base, size uintptr) *segment {
		return &segment{span: arena.Span{Base: base, Size: size}, base: base}
	}
	s1 := seg(x-segSize+512<<10, segSize) // covers the slot's start, ends inside it
	s2 := seg(x+512<<10, 512<<10)         // a short tail inside the slot
	s3 := seg(x+1280<<10, segSize)        // starts inside the slot, covers the next one's start
	for _, s := range []*segment{s1, s2, s3} {
		g.register(s)
	}
	for _, c := range []struct {
		p    uintptr
		want *segment
	}{
		{x, s1}, {x + 511<<10, s1}, {x + 512<<10, s2}, {x + 1023<<10, s2},
		{x + 1100<<10, nil}, {x + 1280<<10, nil}, // s3 did not fit this slot
		{x + segSize, s3}, {x + segSize + 1279<<10, s3}, {x + segSize + 1280<<10, nil},
		{x - 1, s1}, {x - segSize + 511<<10, nil},
		{1 << 47, nil}, // beyond the directory
	} {
		if got := g.segmentOf(c.p); got != c.want {
			t.Errorf("segmentOf(x%+#x) = %p, want %p", int64(c.p-x), got, c.want)
		}
	}
	g.unregister(s3) // must not take s2 out of the slot s3 did not get
	if got := g.segmentOf(x + 512<<10); got != s2 {
		t.Errorf("after unregistering s3: %p, want s2 %p", got, s2)
	}
	if got := g.segmentOf(x + segSize); got != nil {
		t.Errorf("s3 still found after unregistering")
	}
	g.unregister(s2)
	g.unregister(s1)
	for _, p := range []uintptr{x, x + 512<<10, x - 1} {
		if got := g.segmentOf(p); got != nil {
			t.Errorf("segmentOf(x%+#x) = %p after unregistering all", int64(p-x), got)
		}
	}
}

// TestBlockIndex: blockIndex, the lookup of Block and Hold by divMul, is off / bsize at every
// offset of a page of every class (and of sizes the alignment rounds to), where a rounding of
// the product would name the next block.
func TestBlockIndex(t *testing.T) {
	if raceEnabled {
		t.Skip("arithmetic on one goroutine: nothing for the race detector (150 million steps, 5 s under it)")
	}
	sizes := []uintptr{}
	for c := range classSize {
		sizes = append(sizes, uintptr(classSize[c]))
	}
	sizes = append(sizes, 3*64, 7*4096, 24576, 81920)
	for _, b := range sizes {
		nb := uint32((2 << 20) / b)
		pg := &page{bsize: b, nblocks: nb, divMul: ^uint32(0)/uint32(b) + 1}
		for off := uintptr(0); off < uintptr(nb)*b; off++ {
			if got, want := blockIndex(pg, off), uint32(off/b); got != want {
				t.Fatalf("block size %d, offset %d: index %d, want %d", b, off, got, want)
			}
		}
	}
}

// TestInteriorPointerOffset: a free of an address inside a block says how far into the block it
// is, at every offset where the product of divMul rounds up to the next block's index (the last
// bytes of the later blocks of 14 KiB): it said 2⁶⁴ less some thousands.
func TestInteriorPointerOffset(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	const n = 14 << 10 // a class whose divMul rounds: TestBlockIndex
	var ps []uintptr
	for range 30 {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		want := fmt.Sprintf("%#x is %d bytes into a block", p+n-1, n-1)
		for _, err := range []error{h.Free(p + n - 1), h.g.Free(p + n - 1)} {
			if !errors.Is(err, ErrInteriorPointer) || !strings.Contains(err.Error(), want) {
				t.Errorf("free of the last byte of a block at %#x: %v; want ErrInteriorPointer, %q",
					p, err, want)
			}
		}
	}
	for _, p := range ps {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
}
