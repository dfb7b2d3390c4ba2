package pinned

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/heap"
)

// TestBeyondCapacitySaysPool: a request of more than the pool's capacity, or aligned beyond
// it, is ErrTooLarge (the module's kind, and the heap's cause), said once in the pool's words:
// its capacity, not the arena's.
func TestBeyondCapacitySaysPool(t *testing.T) {
	p := newTestPool(t, Options{Capacity: 64 << 20, Backend: Pageable})
	for _, c := range []struct {
		n, align int
		want     string
	}{
		{100, 1 << 40, "pinned: size exceeds the pool's capacity: 100 bytes aligned to " +
			"1099511627776 asked of a pool of capacity 67108864"},
		{65 << 20, 4096, "pinned: size exceeds the pool's capacity: 68157440 bytes aligned to " +
			"4096 asked of a pool of capacity 67108864"},
		{65 << 20, 0, "pinned: size exceeds the pool's capacity: 68157440 bytes asked of a " +
			"pool of capacity 67108864"},
	} {
		var err error
		if c.align == 0 {
			_, err = p.Alloc(c.n)
		} else {
			_, err = p.AllocAligned(c.n, c.align)
		}
		for _, s := range []error{ErrTooLarge, pinmalloc.ErrTooLarge, heap.ErrTooLarge} {
			if !errors.Is(err, s) {
				t.Errorf("%d bytes aligned to %d: %v, want it to match %v", c.n, c.align, err, s)
			}
		}
		if err == nil || err.Error() != c.want {
			t.Errorf("%d bytes aligned to %d: %v, want %q", c.n, c.align, err, c.want)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
