package heap

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestGroupTableIsLazy makes groups over arenas of absurd capacity: a capacity is address
// space, and the chunk table must not cost memory in proportion to it (it once was a flat table
// of 8 bytes per 2 MiB: 512 MiB for 128 TiB, and a fatal out-of-memory for 1<<62).
func TestGroupTableIsLazy(t *testing.T) {
	for _, capacity := range []uintptr{1 << 40, 1 << 47} {
		a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: capacity})
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g, err := NewGroup(a)
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Fatalf("NewGroup over a capacity of %d bytes allocated %d bytes", capacity, grew)
		}
		runtime.KeepAlive(g)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupTableLeaves places blocks 16 GiB apart, so that their chunks fall in different
// leaves of the chunk table, and checks every lookup through it.
func TestGroupTableLeaves(t *testing.T) {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 1 << 40, RegionSize: 64 << 30, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g, err := NewGroup(a)
	if err != nil {
		t.Fatal(err)
	}
	h, err := g.NewHeap(Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ps []uintptr
	ids := map[arena.ChunkID]bool{}
	for range 3 {
		p, err := h.AllocAligned(100, 16<<30)
		if err != nil {
			t.Skipf("cannot reserve 64 GiB of address space here: %v", err)
		}
		id, _ := a.Lookup(p)
		ids[id>>leafShift] = true
		ps = append(ps, p)
	}
	if len(ids) < 2 {
		t.Fatalf("blocks in %d leaf: the test proves nothing", len(ids))
	}
	for _, p := range ps {
		if n, err := g.Size(p); err != nil || n != 100 {
			t.Fatalf("Size(%#x) = %d, %v", p, n, err)
		}
		if o, err := g.Owner(p); err != nil || o != h {
			t.Fatalf("Owner(%#x) = %p, %v", p, o, err)
		}
		if err := g.Free(p); err != nil {
			t.Fatal(err)
		}
		if err := g.Free(p); !errors.Is(err, ErrDoubleFree) {
			t.Fatalf("second free: %v", err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewGroupBadArena(t *testing.T) {
	if _, err := NewGroup(nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NewGroup(nil): %v", err)
	}
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 64 << 20, ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := NewGroup(a); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NewGroup(1 MiB chunks): %v", err)
	}
}

func TestNewGroupRefusesBeyondAddressSpace(t *testing.T) {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := NewGroup(a); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("NewGroup(capacity 1<<62): %v", err)
	}
}

// TestFreeAfterClose: a free of a closed heap says ErrClosed, not ErrDoubleFree.
func TestFreeAfterClose(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{"Free": h.Free(p), "FreeSized": h.FreeSized(p, 100)} {
		if !errors.Is(err, ErrClosed) || errors.Is(err, ErrDoubleFree) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
}

// TestGroupBlock finds the block holding an interior address, for every kind of page.
func TestGroupBlock(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	g := h.Group()
	for _, n := range []uintptr{100, 5000, 40 << 10, 200 << 10, 700 << 10, 3 << 20} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		q, err := h.Alloc(n) // a neighbour, for the block after p
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []uintptr{p, p + 1, p + n/2, p + n - 1} {
			if base, size, err := g.Block(a); err != nil || base != p || size != n {
				t.Fatalf("Block(%#x) in a block of %d at %#x: %#x, %d, %v", a, n, p, base, size, err)
			}
		}
		if base, _, err := g.Block(p + n); err == nil && base == p {
			t.Fatalf("Block(end of a block of %d) found the block", n)
		}
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
		if _, _, err := g.Block(p + n/2); !errors.Is(err, ErrDoubleFree) && !errors.Is(err, ErrNotOwned) {
			t.Fatalf("Block in a freed block of %d: %v", n, err)
		}
		if err := h.Free(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := g.Block(12345); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Block(foreign): %v", err)
	}
}

// TestStaleSizedFreeRacingRealloc frees, again and again from another goroutine, a block the
// owner keeps freeing and allocating with another size: the size check is part of the free's
// compare-and-swap, so the stale free is refused every time, never freeing the new block
// (checked before it was: a free between the check and the swap went through).
func TestStaleSizedFreeRacingRealloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the stale free races the owner's plain store of the state word: the race detector reports it, rightly")
	}
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(96)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		wrong := 0
		for {
			select {
			case <-stop:
				done <- wrong
				return
			default:
			}
			if err := h.g.FreeSized(p, 160); err == nil {
				wrong++
			} else if !errors.Is(err, ErrSizeMismatch) && !errors.Is(err, ErrDoubleFree) {
				t.Errorf("stale free: %v", err)
			}
		}
	}()
	for i := 0; i < 200_000; i++ {
		if err := h.Free(p); err != nil {
			t.Fatalf("owner's free %d: %v", i, err)
		}
		q, err := h.Alloc(96)
		if err != nil || q != p {
			t.Fatalf("owner's alloc %d = %#x (%v), want %#x back", i, q, err, p)
		}
	}
	close(stop)
	if wrong := <-done; wrong != 0 {
		t.Fatalf("%d stale frees of another size went through", wrong)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
}

// TestGroupExtent: Extent is the bytes a live block covers, its size class's or its page's
// rounding included: two blocks of one class taken one after the other lie Extent apart, an
// object or huge block covers at least its size, and a freed block has none (ErrDoubleFree).
func TestGroupExtent(t *testing.T) {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 256 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	g, err := NewGroup(a)
	if err != nil {
		t.Fatal(err)
	}
	h, err := g.NewHeap(Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	p, err := h.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := g.Extent(p)
	if err != nil || ext <= n || q-p != ext {
		t.Fatalf("Extent of a %d-byte block: %d, %v; the next block of its class %d bytes on; want more than %d, the distance", n, ext, err, q-p, n)
	}
	ps := []uintptr{p, q}
	for _, big := range []uintptr{MaxClassSize + 1000, HugeThreshold + 12345} {
		r, err := h.Alloc(big)
		if err != nil {
			t.Fatal(err)
		}
		if ext, err := g.Extent(r); err != nil || ext < big {
			t.Errorf("Extent of a %d-byte block: %d, %v; want at least its size", big, ext, err)
		}
		ps = append(ps, r)
	}
	for _, p := range ps {
		if err := g.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Extent(p); !errors.Is(err, ErrDoubleFree) {
		t.Errorf("Extent of a freed block: %v; want ErrDoubleFree", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// extentWithin checks the Extent of the live block at p, of n bytes: from least up to most, and
// every granule of it committed and wanted by the arena (no memset of it faults, nor races the
// purge). It returns the extent.
func extentWithin(t *testing.T, h *Heap, what string, p, n, least, most uintptr) uintptr {
	t.Helper()
	ext, err := h.g.Extent(p)
	mustOK(t, err)
	if ext < n || ext < least || ext > most || !h.a.Wanted(p, ext) {
		t.Errorf("%s: Extent of a block of %d bytes is %d (committed and wanted: %v); want %d to %d, committed and wanted", what, n, ext, h.a.Wanted(p, ext), least, most)
	}
	return ext
}

// TestGroupExtentCommitted: the Extent of a huge object reaches the end of the granule its size
// ends in (committed whole: the owner's work writes there without a fault), and no further than
// the arena commits for it. A fresh one's granule is committed whole (Extent was the size asked:
// a kernel's writes past it, in that granule, were not cleared). A kept one reused for fewer
// bytes gives the granules past them to the purge, and one the arena gave up is committed again
// only as far as the size asked: Extent was the whole span, which reached granules the arena no
// longer wants (a memset there faults once the purge has run).
func TestGroupExtentCommitted(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 256 << 20, PurgeDelay: time.Hour}, Options{})
	g := h.g.granule
	const big, small = 16<<20 + 100, 9<<20 + 100
	up := func(n uintptr) uintptr { return (n + g - 1) &^ (g - 1) }
	p, err := h.Alloc(big)
	mustOK(t, err)
	extentWithin(t, h, "fresh", p, big, up(big), up(big))
	mustOK(t, h.Free(p))
	for _, c := range []struct {
		what string
		n    uintptr
		ext  uintptr
		trim bool
	}{
		{"kept, reused for a few bytes less (the tail under a granule stays)", big - 50, up(big), false},
		{"kept, reused for fewer bytes (the tail goes to the purge)", small, up(small), false},
		{"given up by the arena, reused", small, up(small), true},
	} {
		if c.trim {
			h.a.Trim() // gives the kept range up, and decommits it
		}
		q, err := h.Alloc(c.n)
		mustOK(t, err)
		if q != p {
			t.Fatalf("%s: the kept huge object was not reused (%#x, then %#x)", c.what, p, q)
		}
		extentWithin(t, h, c.what, q, c.n, c.ext, c.ext)
		mustOK(t, h.Free(q))
	}
}

// TestGroupExtentPackedTail: where memory commits 2 MiB at a time, a huge object shares its
// last chunk with other pages (pack.go): its Extent covers its own slices of that chunk and
// none of the others'; reused for fewer bytes, it reaches only the granules still committed
// for it.
func TestGroupExtentPackedTail(t *testing.T) {
	h := newTestHeapOn(t, arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 128 << 20, PurgeDelay: time.Hour}, Options{})
	if !h.packed || !h.g.packRuns || h.g.granule != segSize || h.objMax != 16<<20 {
		t.Fatalf("2 MiB granules: packed %v, runs %v, granule %d, objects to %d; want packed runs of 2 MiB granules, objects to 16 MiB", h.packed, h.g.packRuns, h.g.granule, h.objMax)
	}
	const n = 40<<20 + 1<<19 // 20 chunks and a quarter of a 21st, whose rest other pages take
	p, err := h.Alloc(n)
	mustOK(t, err)
	obj, err := h.Alloc(1 << 20)
	mustOK(t, err)
	if obj < p+n || obj >= p+21<<segShift {
		t.Fatalf("the 1 MiB object at %#x is not in the last chunk of the huge one at %#x", obj, p)
	}
	extentWithin(t, h, "fresh, with a tail", p, n, n, n) // its own slices of the last chunk, no more
	mustOK(t, h.Free(p))
	const small = 21<<20 + 100 // above half of it, above the largest object page
	q, err := h.Alloc(small)
	mustOK(t, err)
	if q != p {
		t.Fatalf("the kept huge object was not reused (%#x, then %#x)", p, q)
	}
	extentWithin(t, h, "kept, reused for fewer bytes", q, small, 22<<20, 22<<20)
	mustOK(t, h.Free(q))
	mustOK(t, h.Free(obj))
}

// TestGroupExtentOffGrid: over an external region 8 bytes past a page boundary, whose granules
// (its pages, counted from its base) lie off the address space's page grid, a huge object's
// extent ends where the region's granule ends, not at the next page boundary of the address
// space, which may lie in a granule not committed for it.
func TestGroupExtentOffGrid(t *testing.T) {
	const size = 32 << 20
	m, err := unix.Mmap(-1, 0, size+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	mustOK(t, err)
	defer func() { mustOK(t, unix.Munmap(m)) }()
	reg := arena.ExternalRegion{Base: mem.Addr(m) + 8, Size: size, Kind: arena.HostPageable, Exclusive: true}
	prov, err := arena.External(reg)
	mustOK(t, err)
	h := newTestHeapOn(t, arena.Options{Provider: prov, PurgeDelay: -1}, Options{Align: 256})
	g := h.g.granule
	probe, err := h.Alloc(3 << 20)
	mustOK(t, err)
	mustOK(t, h.Free(probe))
	h.Trim() // its chunks go back to the arena, for the next huge object
	// The size whose last byte is the first of a page of the address space: that page's end is
	// 8 bytes past the end of the region's granule the byte lies in.
	n := (probe+3<<20)&^(g-1) - probe + 1
	p, err := h.Alloc(n)
	mustOK(t, err)
	if p != probe {
		t.Fatalf("the huge object is not where the probe was (%#x, then %#x)", probe, p)
	}
	gend := reg.Base + (p+n-1-reg.Base)/g*g + g // the end of the region's granule
	extentWithin(t, h, "off the page grid", p, n, gend-p, gend-p)
	mustOK(t, h.Free(p))
}
