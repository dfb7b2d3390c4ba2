package pinned_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

type regionLog struct{ live map[uintptr]uintptr }

func (l *regionLog) Mapped(r *arena.Region) error { l.live[r.Base] = r.Size; return nil }
func (l *regionLog) Unmapping(r *arena.Region)    { delete(l.live, r.Base) }

// TestObserveRegions: an observer of a pool is told of the region that holds its buffers, and
// of its end when the pool's memory is released.
func TestObserveRegions(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 64 << 20})
	b, err := p.Alloc(1 << 20)
	ok(t, "Alloc", err)
	l := &regionLog{live: map[uintptr]uintptr{}}
	ok(t, "ObserveRegions", p.ObserveRegions(l))
	in := false
	for base, size := range l.live {
		in = in || mem.Addr(b) >= base && mem.Addr(b)+uintptr(len(b)) <= base+size
	}
	if !in {
		t.Fatalf("the buffer lies in none of the regions told: %v", l.live)
	}
	ok(t, "Free", p.Free(b))
	ok(t, "Close", p.Close())
	if len(l.live) != 0 {
		t.Fatalf("%d regions left with the observer after Close", len(l.live))
	}
	if err := p.ObserveRegions(l); !errors.Is(err, pinned.ErrClosed) {
		t.Fatalf("ObserveRegions after Close: %v", err)
	}
}
