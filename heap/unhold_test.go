package heap

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

// TestUnhold checks that Unhold leaves a held block live and freeable by the ordinary free, and
// refuses blocks that are not held, not live or of another size.
func TestUnhold(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	for _, n := range []uintptr{100, 300 << 10, 3 << 20} { // a class block, an object page, a huge object
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.g.Unhold(p, n); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("Unhold of a block not held: %v", err)
		}
		if first, err := h.g.HoldSized(p, n); err != nil || !first {
			t.Fatal(first, err)
		}
		if err := h.FreeSized(p, n); !errors.Is(err, ErrHeld) {
			t.Fatalf("free of a held block: %v", err)
		}
		if err := h.g.Unhold(p, n+1); !errors.Is(err, ErrSizeMismatch) {
			t.Fatalf("Unhold with the wrong size: %v", err)
		}
		if err := h.g.Unhold(p, n); err != nil {
			t.Fatal(err)
		}
		if h.g.Held(p) {
			t.Fatal("still held after Unhold")
		}
		if err := h.FreeSized(p, n); err != nil {
			t.Fatalf("free after Unhold: %v", err)
		}
		if err := h.g.Unhold(p, n); !errors.Is(err, ErrDoubleFree) {
			t.Fatalf("Unhold of a freed block: %v", err)
		}
	}
	if err := h.g.Unhold(0x1000, 8); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Unhold of a foreign address: %v", err)
	}
}

// TestUnholdNotHeldWrongSize: Unhold of a live block that is not held, with the wrong size,
// says the size is wrong, in Unhold's words (it named FreeHeld, and said invalid argument).
func TestUnholdNotHeldWrongSize(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	for _, n := range []uintptr{100, 300 << 10, 3 << 20} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		err = h.g.Unhold(p, n+1)
		if !errors.Is(err, ErrSizeMismatch) || strings.Contains(err.Error(), "FreeHeld") {
			t.Errorf("Unhold of a block of %d not held, with %d bytes: %v", n, n+1, err)
		}
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnholdRacesFreeHeld races an Unhold with a FreeHeld of every held block (class blocks
// held by the owner's plain hold and by the group's, and object pages), from two goroutines:
// exactly one wins each block. When the Unhold wins, the FreeHeld finds the block not held and
// it stays live, for an ordinary free; when the FreeHeld wins, the Unhold finds it freed.
func TestUnholdRacesFreeHeld(t *testing.T) {
	h := newTestHeap(t, 256<<20, Options{})
	size := func(i int) uintptr {
		if i%100 == 0 {
			return 1 << 20
		}
		return 64
	}
	rounds := 4
	if longRun() {
		rounds = 20
	}
	for range rounds {
		ps := make([]uintptr, 2000)
		for i := range ps {
			p, err := h.Alloc(size(i))
			if err != nil {
				t.Fatal(err)
			}
			ps[i] = p
			if _, ok := h.TryHoldSized(p, size(i)); i%2 == 1 || !ok {
				if _, err := h.g.HoldSized(p, size(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		unheld := make([]bool, len(ps))
		freed := make([]bool, len(ps))
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i, p := range ps {
				switch err := h.g.Unhold(p, size(i)); {
				case err == nil:
					unheld[i] = true
				case !errors.Is(err, ErrDoubleFree):
					t.Errorf("Unhold %#x: %v", p, err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := len(ps) - 1; i >= 0; i-- {
				switch err := h.g.FreeHeld(ps[i], size(i)); {
				case err == nil:
					freed[i] = true
				case !errors.Is(err, ErrInvalidArgument):
					t.Errorf("FreeHeld %#x: %v", ps[i], err)
				}
			}
		}()
		wg.Wait()
		for i, p := range ps {
			if unheld[i] == freed[i] {
				t.Fatalf("block %#x: unheld %v, freed %v: exactly one must win", p, unheld[i], freed[i])
			}
			if unheld[i] {
				if err := h.FreeSized(p, size(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		h.Collect()
		if err := h.verify(); err != nil {
			t.Fatal(err)
		}
	}
}
