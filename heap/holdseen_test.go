package heap

import (
	"sync/atomic"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// TestPropertyHeldPageStaysShared checks the rule that a class page one of whose blocks was
// held (through the group, or by its owner on a shared page) or looked up for a hold
// (FindFrom) never becomes exclusive again, even once the hold has ended: 2*reexclusiveAfter
// owner frees on it later it is shared still. Built with the invariants (-tags invariants or
// -race) reexclusive and verify check the rule against the page's record of holds
// (holdSeen), so a path that breaks it panics there; the name puts it in the invariants stage
// of the CI, which runs -run 'Property|Fuzz'.
func TestPropertyHeldPageStaysShared(t *testing.T) {
	cases := []struct {
		what string
		hold func(h *Heap, p uintptr) error // holds block p of 64 bytes, or looks it up
		end  func(h *Heap, p uintptr) error // ends the hold and frees p
	}{
		{"Hold, FreeHeld", func(h *Heap, p uintptr) error {
			_, _, _, err := h.g.Hold(p)
			return err
		}, func(h *Heap, p uintptr) error { return h.g.FreeHeld(p, 64) }},
		{"HoldSized, Unhold", func(h *Heap, p uintptr) error {
			_, err := h.g.HoldSized(p, 64)
			return err
		}, func(h *Heap, p uintptr) error {
			if err := h.g.Unhold(p, 64); err != nil {
				return err
			}
			return h.FreeSized(p, 64)
		}},
		{"FindFrom, BlockRef.Hold", func(h *Heap, p uintptr) error {
			if r, ok := h.g.FindFrom(p, 64); !ok {
				t.Fatal("FindFrom of a live block")
			} else if first, ok := r.Hold(); !first || !ok {
				t.Fatalf("BlockRef.Hold: first %v ok %v", first, ok)
			}
			return nil
		}, func(h *Heap, p uintptr) error { return h.FreeHeld(p, 64) }},
		{"FindFrom alone", func(h *Heap, p uintptr) error {
			if _, ok := h.g.FindFrom(p, 64); !ok {
				t.Fatal("FindFrom of a live block")
			}
			return nil
		}, func(h *Heap, p uintptr) error { return h.FreeSized(p, 64) }},
		{"owner's hold of a shared page", func(h *Heap, p uintptr) error {
			q, err := h.Alloc(64) // freed remotely: shares the page, and is collected
			if err != nil {
				return err
			}
			if err := h.g.FreeSized(q, 64); err != nil {
				return err
			}
			if first, ok := h.TryHoldSized(p, 64); !first || !ok {
				t.Fatalf("TryHoldSized on a shared page: first %v ok %v", first, ok)
			}
			return nil
		}, func(h *Heap, p uintptr) error { return h.FreeHeld(p, 64) }},
	}
	for _, c := range cases {
		h := newTestHeap(t, 64<<20, Options{})
		if !h.g.exclusive {
			t.Skip("pages start shared here (no membarrier)")
		}
		keep, err := h.Alloc(64) // keeps the page from being given back
		if err != nil {
			t.Fatal(err)
		}
		p, err := h.Alloc(64)
		if err != nil {
			t.Fatal(err)
		}
		pg, _, _ := h.g.find(p)
		if err := c.hold(h, p); err != nil {
			t.Fatalf("%s: hold: %v", c.what, err)
		}
		if err := c.end(h, p); err != nil {
			t.Fatalf("%s: end: %v", c.what, err)
		}
		ownerPairs(t, h, 2*reexclusiveAfter) // reexclusive's tries, with no sharer at work
		if m := atomic.LoadUint32(&pg.mode); m != shared {
			t.Fatalf("%s: the page became exclusive again (mode %d)", c.what, m)
		}
		if invariants.Enabled && !pg.holdSeen.seen() {
			t.Fatalf("%s: the page has no record of its hold", c.what)
		}
		if err := h.FreeSized(keep, 64); err != nil {
			t.Fatal(err)
		}
		h.Collect()
		if err := h.verify(); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
	}
}

// TestVerifyCatchesHeldPageExclusive: an exclusive class page one of whose blocks was held is
// one whose holder's compare-and-swaps race the owner's plain stores; verify reports it where
// the page keeps a record of its holds (the invariants build).
func TestVerifyCatchesHeldPageExclusive(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the record of holds is kept with -tags invariants or -race only")
	}
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := h.g.Hold(p); err != nil {
		t.Fatal(err)
	}
	if err := h.g.FreeHeld(p, 64); err != nil {
		t.Fatal(err)
	}
	h.Collect()
	q, err := h.Alloc(64) // keeps the page
	if err != nil {
		t.Fatal(err)
	}
	pg, _, _ := h.g.find(q)
	verifyCatches(t, h, "held page made exclusive", "one of its blocks was held", func() {
		atomic.StoreUint32(&pg.mode, exclusive)
	}, func() { atomic.StoreUint32(&pg.mode, shared) })
	if err := h.FreeSized(q, 64); err != nil {
		t.Fatal(err)
	}
}
