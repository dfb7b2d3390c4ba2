package heap

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestFreeListWords checks the free list threaded through the state words (freeLink): every
// reader of a word refuses a block on the list as free, on exclusive and shared pages, by the
// owner and by another goroutine's paths; the list hands the blocks back last freed first, each
// once; and the heap's invariants (verify: the list walk, no link word off the list) hold
// after each step.
func TestFreeListWords(t *testing.T) {
	for _, share := range []bool{false, true} {
		h := newTestHeap(t, 64<<20, Options{})
		g := h.Group()
		const n = 200
		ps := make([]uintptr, n)
		for i := range ps {
			var err error
			if ps[i], err = h.Alloc(48); err != nil {
				t.Fatal(err)
			}
		}
		if share {
			// A hold through the group shares the page (exclusive.go) for good.
			if _, err := g.HoldSized(ps[n-1], 48); err != nil {
				t.Fatal(err)
			}
		}
		r := rand.New(rand.NewPCG(1, 2))
		order := r.Perm(n - 1)
		for _, i := range order {
			if err := h.FreeSized(ps[i], 48); err != nil {
				t.Fatalf("share %v: free %d: %v", share, i, err)
			}
		}
		if err := h.verify(); err != nil {
			t.Fatalf("share %v: %v", share, err)
		}
		for _, i := range order {
			p := ps[i]
			for name, err := range map[string]error{
				"Free": h.Free(p), "FreeSized": h.FreeSized(p, 48), "Group.Free": g.Free(p),
				"Group.FreeSized": g.FreeSized(p, 48),
			} {
				if !errors.Is(err, ErrDoubleFree) {
					t.Fatalf("share %v: %s of a block on the free list: %v, want ErrDoubleFree", share, name, err)
				}
			}
			if _, err := g.HoldSized(p, 48); err == nil {
				t.Fatalf("share %v: HoldSized of a block on the free list succeeded", share)
			}
			if g.Held(p) || h.TryFree(p, 48) || h.TryFreeHeld(p, 48) {
				t.Fatalf("share %v: a block on the free list is held or freed again", share)
			}
			if _, ok := h.TryHoldSized(p, 48); ok {
				t.Fatalf("share %v: TryHoldSized of a block on the free list succeeded", share)
			}
			if sz, err := g.Size(p); err == nil || sz != 0 {
				t.Fatalf("share %v: Size of a block on the free list: %d, %v", share, sz, err)
			}
		}
		if err := h.verify(); err != nil {
			t.Fatalf("share %v: after the refused frees: %v", share, err)
		}
		// Last freed first, each once.
		for k := len(order) - 1; k >= 0; k-- {
			p, err := h.Alloc(48)
			if err != nil {
				t.Fatal(err)
			}
			if want := ps[order[k]]; p != want {
				t.Fatalf("share %v: alloc %d gave %#x, want %#x (the list is LIFO)", share, len(order)-1-k, p, want)
			}
			if sz, err := g.Size(p); err != nil || sz != 48 {
				t.Fatalf("share %v: Size of a block handed out again: %d, %v", share, sz, err)
			}
		}
		if err := h.verify(); err != nil {
			t.Fatalf("share %v: %v", share, err)
		}
		for _, p := range ps[:n-1] {
			if err := h.FreeSized(p, 48); err != nil {
				t.Fatal(err)
			}
		}
		free := h.FreeSized
		if share {
			free = h.FreeHeld
		}
		if err := free(ps[n-1], 48); err != nil {
			t.Fatal(err)
		}
	}
}
