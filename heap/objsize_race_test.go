package heap

import (
	"errors"
	"sync/atomic"
	"testing"
)

// An object page's size, read by Size from any goroutine (a free's check of a buffer's whole
// length), and written by its owner as it hands the page out again: a Free of a buffer freed
// already races its reallocation so. Written and read plainly, `go test -race` reported the
// race inside the heap, where the caller had made only a double free (the state word read
// first orders nothing: the owner's next write comes after it).
func TestObjectSizeReadBesideReallocation(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	g := h.g
	const size = maxClassSize + 4096
	p, err := h.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	done := make(chan error)
	go func() { // another goroutine's Frees of p, some of them of a block freed already
		for !stop.Load() {
			if n, err := g.Size(p); err != nil && !errors.Is(err, ErrDoubleFree) || err == nil && n != size && n != size+64 {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range 20000 {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
		q, err := h.Alloc(size + uintptr(i%2)*64) // the same page, its size written again
		if err != nil {
			t.Fatal(err)
		}
		if q != p {
			t.Fatalf("the object came back at %#x, not %#x", q, p)
		}
	}
	stop.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
}
