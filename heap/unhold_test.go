package heap

import (
	"errors"
	"strings"
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
