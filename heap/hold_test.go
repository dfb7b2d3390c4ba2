package heap

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestHoldErrors checks Hold and FreeHeld on addresses that hold no live block, and FreeHeld of
// a block that is not held.
func TestHoldErrors(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.FreeHeld(p, 100); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("FreeHeld of a block not held: %v", err)
	}
	if _, _, _, err := h.g.Hold(p + 100); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Hold past the size asked for: %v", err)
	}
	if _, _, _, err := h.g.Hold(0x1000); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Hold of a foreign address: %v", err)
	}
	if _, _, _, err := h.g.Hold(p); err != nil {
		t.Fatal(err)
	}
	if err := h.g.FreeHeld(p, 99); !errors.Is(err, ErrSizeMismatch) {
		t.Fatalf("FreeHeld with the wrong size: %v", err)
	}
	if err := h.g.FreeHeld(p+16, 100); !errors.Is(err, ErrInteriorPointer) {
		t.Fatalf("FreeHeld of an interior pointer: %v", err)
	}
	if err := h.FreeHeld(p, 100); err != nil {
		t.Fatal(err)
	}
	if err := h.FreeHeld(p, 100); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("second FreeHeld: %v", err)
	}
	if _, _, _, err := h.g.Hold(p); !errors.Is(err, ErrDoubleFree) {
		t.Fatalf("Hold of a freed block: %v", err)
	}
}

// TestHoldRacesFree races a Hold with a free of every block, from two goroutines: exactly one
// wins each block. When the free wins, the Hold finds no live block; when the Hold wins, the
// free finds it held and the block is still live, and FreeHeld takes it back.
func TestHoldRacesFree(t *testing.T) {
	h := newTestHeap(t, 256<<20, Options{})
	rounds := 3
	if longRun() {
		rounds = 10
	}
	for range rounds {
		ps := make([]uintptr, 3000)
		for i := range ps {
			n := uintptr(1 + i%5000)
			if i%200 == 0 {
				n = 1<<20 + uintptr(i) // huge objects too
			}
			var err error
			if ps[i], err = h.Alloc(n); err != nil {
				t.Fatal(err)
			}
		}
		freed := make([]atomic.Bool, len(ps))
		heldBy := make([]atomic.Bool, len(ps))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i, p := range ps {
				switch err := h.g.Free(p); {
				case err == nil:
					freed[i].Store(true)
				case !errors.Is(err, ErrHeld):
					t.Errorf("free %#x: %v", p, err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := len(ps) - 1; i >= 0; i-- {
				switch _, _, first, err := h.g.Hold(ps[i]); {
				case err == nil && first:
					heldBy[i].Store(true)
				case err == nil || !errors.Is(err, ErrDoubleFree):
					t.Errorf("hold %#x: first %v, %v", ps[i], first, err)
				}
			}
		}()
		wg.Wait()
		for i, p := range ps {
			if freed[i].Load() == heldBy[i].Load() {
				t.Fatalf("block %#x: freed %v, held %v: exactly one must win", p, freed[i].Load(), heldBy[i].Load())
			}
			if heldBy[i].Load() {
				sz, err := h.g.Size(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := h.g.FreeHeld(p, sz); err != nil {
					t.Fatal(err)
				}
			}
		}
		h.Collect()
		if st := h.Stats(); st.Live != 0 {
			t.Fatalf("%d blocks live after freeing all", st.Live)
		}
	}
}

// TestOwnerHold checks the owner's paths for held blocks: TryHoldSized serves a block of a page
// of the owner's (keeping an exclusive page exclusive) and refuses, changing nothing, what
// HoldSized would refuse or another heap's block; TryFreeOrHeld reports a held block of
// the size asked, and only that; TryFreeHeld takes it back through the cache.
func TestOwnerHold(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.TryHoldSized(p, 99); ok {
		t.Fatal("TryHoldSized with the wrong size")
	}
	if _, ok := h.TryHoldSized(p, 100); !ok {
		t.Fatal("TryHoldSized of a block of the owner's page not in the cache")
	}
	if err := h.FreeHeld(p, 100); err != nil {
		t.Fatal(err)
	}
	if p, err = h.Alloc(100); err != nil {
		t.Fatal(err)
	}
	other, err := h.g.NewHeap(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, ok := other.TryHoldSized(p, 100); ok || h.g.Held(p) {
		t.Fatal("TryHoldSized of a block of another heap")
	}
	if err := h.FreeSized(q, 100); err != nil {
		t.Fatal(err)
	}
	pg, _, hit := h.nearBlock(p)
	if !hit || atomic.LoadUint32(&pg.mode) != exclusive && h.g.exclusive {
		t.Fatalf("after a free of its own: cached %v, mode %d", hit, pg.mode)
	}
	for _, n := range []uintptr{0, 99, 101} {
		if _, ok := h.TryHoldSized(p, n); ok || h.g.Held(p) {
			t.Fatalf("TryHoldSized with %d bytes of a block of 100", n)
		}
	}
	if _, ok := h.TryHoldSized(q, 100); ok {
		t.Fatal("TryHoldSized of a free block")
	}
	if first, ok := h.TryHoldSized(p, 100); !ok || !first || !h.g.Held(p) {
		t.Fatalf("TryHoldSized: first %v ok %v held %v", first, ok, h.g.Held(p))
	}
	if atomic.LoadUint32(&pg.mode) != exclusive && h.g.exclusive {
		t.Fatal("the owner's hold shared its page") // a plain store: holdExcl
	}
	if first, ok := h.TryHoldSized(p, 100); !ok || first {
		t.Fatalf("second TryHoldSized: first %v ok %v", first, ok)
	}
	if freed, held := h.TryFreeOrHeld(p, 99); freed || held {
		t.Fatalf("TryFreeOrHeld with the wrong size: freed %v held %v", freed, held)
	}
	if freed, held := h.TryFreeOrHeld(p, 100); freed || !held {
		t.Fatalf("TryFreeOrHeld of a held block: freed %v held %v", freed, held)
	}
	if h.TryFreeHeld(p, 99) {
		t.Fatal("TryFreeHeld with the wrong size")
	}
	if !h.TryFreeHeld(p, 100) {
		t.Fatal("TryFreeHeld of a held block")
	}
	if freed, held := h.TryFreeOrHeld(p, 100); freed || held {
		t.Fatalf("TryFreeOrHeld of a freed block: freed %v held %v", freed, held)
	}
	if h.TryFreeHeld(p, 100) {
		t.Fatal("TryFreeHeld twice")
	}
	if st := h.Stats(); st.Live != 0 {
		t.Fatalf("live after the frees: %+v", st)
	}
}

// TestTryHoldFrom checks the one-lookup hold of a range from a block's start: it holds for a
// range within the size asked for, and refuses, holding nothing, an interior start, a range
// past the size, a free block and an address outside the arena.
func TestTryHoldFrom(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	for _, n := range []uintptr{100, 300 << 10, 4 << 20} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ p, n uintptr }{{p + 16, 1}, {p, n + 1}, {p, 0}, {0x1000, 1}} {
			if _, ok := tryHoldFrom(h.g, c.p, c.n); ok || h.g.Held(p) {
				t.Fatalf("tryHoldFrom(%#x, %d) of a block at %#x of %d bytes", c.p, c.n, p, n)
			}
		}
		if first, ok := tryHoldFrom(h.g, p, n/2); !ok || !first || !h.g.Held(p) {
			t.Fatalf("tryHoldFrom of half a block of %d bytes: first %v ok %v", n, first, ok)
		}
		if first, ok := tryHoldFrom(h.g, p, n); !ok || first {
			t.Fatalf("second tryHoldFrom: first %v ok %v", first, ok)
		}
		if err := h.FreeHeld(p, n); err != nil {
			t.Fatal(err)
		}
		if _, ok := tryHoldFrom(h.g, p, 1); ok {
			t.Fatalf("tryHoldFrom of a freed block of %d bytes", n)
		}
	}
}

// tryHoldFrom is FindFrom and the BlockRef's Hold, as package pinned's Hold makes them.
func tryHoldFrom(g *Group, p, n uintptr) (first, ok bool) {
	r, ok := g.FindFrom(p, n)
	if !ok {
		return false, false
	}
	return r.Hold()
}
