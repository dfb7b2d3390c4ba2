package pinned

import (
	"errors"
	"math"
	"testing"
)

// TestCapacityBounds: a capacity is refused at New, with an error naming the bounds, when it is
// below one chunk or beyond the address space; it once killed the process (a chunk table of 8
// bytes per 2 MiB of capacity, allocated up front: fatal error: runtime: out of memory).
func TestCapacityBounds(t *testing.T) {
	for _, c := range []int64{math.MaxInt64, 1 << 60, MaxCapacity + 1, 1, MinCapacity - 1} {
		p, err := New(Options{Capacity: int(c), Backend: Pageable})
		if !errors.Is(err, ErrInvalidOptions) {
			if p != nil {
				_ = p.Close()
			}
			t.Fatalf("New(capacity %d): %v", c, err)
		}
		t.Log(err)
	}
	// A huge capacity that fits is address space only: the pool serves from it at once.
	p, err := New(Options{Capacity: 1 << 40, Backend: Pageable})
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
