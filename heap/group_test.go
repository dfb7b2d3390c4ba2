package heap

import (
	"errors"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
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
