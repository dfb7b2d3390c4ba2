package heap

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
)

// newTestHeap returns a heap over a locked arena of the given capacity, closed at cleanup.
func newTestHeap(t testing.TB, capacity uintptr, o Options) *Heap {
	t.Helper()
	a, err := arena.New(arena.Options{Provider: arena.Pageable(arena.HostOptions{}), Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(a, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("heap close: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("arena close: %v", err)
		}
	})
	return h
}

func TestSmoke(t *testing.T) {
	h := newTestHeap(t, 256<<20, Options{})
	var ps []uintptr
	for _, n := range []uintptr{1, 16, 17, 100, 1000, 4096, 9000, 70000, 300000, 1 << 20, 3 << 20, 40 << 20} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		if p%64 != 0 {
			t.Fatalf("Alloc(%d) = %#x misaligned", n, p)
		}
		ps = append(ps, p)
	}
	for _, p := range ps {
		if err := h.Free(p); err != nil {
			t.Fatalf("Free(%#x): %v", p, err)
		}
		if err := h.Free(p); !errors.Is(err, ErrDoubleFree) {
			t.Fatalf("double Free(%#x): %v", p, err)
		}
	}
}

func BenchmarkPairMixed(b *testing.B) {
	h := newTestHeap(b, 1<<30, Options{})
	r := rand.New(rand.NewPCG(1, 2))
	sizes := make([]uintptr, 1024)
	for i := range sizes {
		sizes[i] = 16 + uintptr(r.IntN(8192-16+1))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := h.Alloc(sizes[i&1023])
		if err != nil {
			b.Fatal(err)
		}
		if err := h.Free(p); err != nil {
			b.Fatal(err)
		}
	}
}
