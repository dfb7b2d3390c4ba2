package heap

import (
	"sync/atomic"
	"testing"
)

// TestOwnerFindAndHold checks the owner's record path (pinned's RecordStream): TryFindFrom finds
// a block of its own class page from the block's start, in the page cache or the tables (then
// cached), and refuses, changing nothing, what FindFrom refuses and another heap's block;
// TryHoldRef holds it with a plain store that keeps an exclusive page exclusive, and refuses a
// block freed since it was found; TryTag and NearTag give the block's tag only once its page's
// tags are made, the same word Group.Tag gives; TryFreeOrHeld reports the owner's hold on an
// exclusive page without sharing it.
func TestOwnerFindAndHold(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	p, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	exclusiveNow := func(what string) {
		t.Helper()
		pg, _, hit := h.nearBlock(p)
		if !hit {
			t.Fatalf("%s: p's page not in the cache", what)
		}
		if h.g.exclusive && atomic.LoadUint32(&pg.mode) != exclusive {
			t.Fatalf("%s: the page is shared (mode %d)", what, pg.mode)
		}
	}
	r, ok := h.TryFindFrom(p, 100)
	if !ok {
		t.Fatal("TryFindFrom of a block of the owner's page")
	}
	exclusiveNow("TryFindFrom") // cached from the tables, not shared
	for _, c := range []struct{ p, n uintptr }{{p + 16, 1}, {p, 101}, {p, 0}, {0x1000, 1}} {
		if _, ok := h.TryFindFrom(c.p, c.n); ok {
			t.Fatalf("TryFindFrom(%#x, %d) of a block at %#x of 100 bytes", c.p, c.n, p)
		}
	}
	other, err := h.g.NewHeap(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, ok := other.TryFindFrom(p, 100); ok {
		t.Fatal("TryFindFrom of another heap's block")
	}
	if r.TryTag() != nil || h.NearTag(p) != nil || h.g.Tag(p) != nil {
		t.Fatal("a tag before the page's tags were made")
	}
	tag := r.Tag()
	if r.TryTag() != tag || h.NearTag(p) != tag || h.g.Tag(p) != tag {
		t.Fatal("TryTag, NearTag and Group.Tag differ from BlockRef.Tag")
	}
	if h.NearTag(q+8) != nil {
		t.Fatal("NearTag of an address inside a block")
	}
	if first, ok := h.TryHoldRef(r); !ok || !first || !h.g.Held(p) {
		t.Fatalf("TryHoldRef: first %v ok %v held %v", first, ok, h.g.Held(p))
	}
	exclusiveNow("TryHoldRef")
	if first, ok := h.TryHoldRef(r); !ok || first {
		t.Fatalf("second TryHoldRef: first %v ok %v", first, ok)
	}
	if freed, held := h.TryFreeOrHeld(p, 100); freed || !held {
		t.Fatalf("TryFreeOrHeld of a held block: freed %v held %v", freed, held)
	}
	exclusiveNow("TryFreeOrHeld")
	if !h.TryFreeHeld(p, 100) {
		t.Fatal("TryFreeHeld of a held block")
	}
	exclusiveNow("TryFreeHeld")

	// A block freed after TryFindFrom found it is not held, nor is the block handed out in its
	// place if it has another size.
	rq, ok := h.TryFindFrom(q, 50)
	if !ok {
		t.Fatal("TryFindFrom of half a block")
	}
	if err := h.FreeSized(q, 100); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.TryHoldRef(rq); ok || h.g.Held(q) {
		t.Fatal("TryHoldRef of a block freed since it was found")
	}
	if st := h.Stats(); st.Live != 0 {
		t.Fatalf("live after the frees: %+v", st)
	}
}
