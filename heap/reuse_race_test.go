package heap

import (
	"sync"
	"testing"
)

// TestBlockRacingReuseNoRace: a caller's Block or Hold of a block racing its Free and the
// block's reuse by the owner is the caller's race, which the heap answers (a free block, or
// the new one), but the race detector must not report it inside the heap: the owner's store
// of the state word when it takes the block is atomic in race builds. Before, -race reported
// take's plain store against liveSize's atomic load.
func TestBlockRacingReuseNoRace(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	for i := 0; i < 4; i++ {
		hold, n := i&1 != 0, []uintptr{64, 1 << 20}[i>>1] // a class block, an object page
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // started before the reuse, joined after it: ordered with neither store
			defer wg.Done()
			if hold {
				if base, size, first, err := h.g.Hold(p); err == nil && first {
					_ = h.g.Unhold(base, size) // the new block, held while the owner had it
				}
			} else {
				_, _, _ = h.g.Block(p)
			}
		}()
		q, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if q != p {
			t.Fatalf("Alloc after Free: %#x, want the block freed, %#x", q, p)
		}
		wg.Wait()
		if h.g.Held(q) {
			t.Fatal("the block is held after Unhold")
		}
		if err := h.Free(q); err != nil {
			t.Fatal(err)
		}
	}
}
