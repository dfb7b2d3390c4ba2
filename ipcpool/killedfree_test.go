package ipcpool

import (
	"errors"
	"testing"
)

// A process killed between letting a buffer's last reference go and retiring its entry (a
// FreeHandle past its compare-and-swap of the allocation, a Release past the clear of its
// retain bit) leaves the entry live with no reference and no retirer. Its holder, alive, takes
// the buffer back at its next scan all the same: the memory is not lost while the holder lives.
// The test writes, into the control region, what the killed process had written.
func TestPeerKilledMidFreeLosesNoBuffer(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	c := &w.c

	// A FreeHandle killed after its compare-and-swap.
	b1, err := w.Alloc(4096)
	must(t, "Alloc", err)
	h1, err := w.Handle(b1)
	must(t, "Handle", err)
	st1 := c.entry(int(h1.Entry)) + eState
	if !c.cas(st1, packState(h1.Gen, eLive|eAlloc), packState(h1.Gen, eLive)) {
		t.Fatalf("entry state %#x", c.load(st1))
	}

	// A Release killed after the clear of its retain bit, the allocation freed before.
	b2, err := w.Alloc(4096)
	must(t, "Alloc", err)
	h2, err := w.Handle(b2)
	must(t, "Handle", err)
	must(t, "Retain", p.Retain(h2))
	must(t, "Free", w.Free(b2))
	if changed, _ := c.setRetain(int(h2.Entry), p.slot, false); !changed {
		t.Fatal("no retain bit of the peer's")
	}

	in := w.SharedStats().RetiredIn
	w.drainMu.Lock()
	w.scanRetired()
	w.drainMu.Unlock()
	for _, h := range []Handle{h1, h2} {
		if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
			t.Errorf("%v: a buffer no reference keeps, after its holder's scan: %v", h, err)
		}
	}
	if got := w.SharedStats().RetiredIn - in; got != 2 {
		t.Errorf("%d buffers taken back, want 2", got)
	}
}

// A process killed inside a retirement, between marking the entry retiring and backing the
// mark off for a retain that landed meanwhile, leaves the mark on a buffer that retain keeps:
// its holder takes the buffer back only once the last retain is let go, never under it.
func TestPeerKilledMidRetireSparesARetain(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{})
	c := &w.c

	b, err := w.Alloc(4096)
	must(t, "Alloc", err)
	fillSeq(b, 7)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	must(t, "Retain", p.Retain(h))
	must(t, "Free", w.Free(b)) // the retain is the buffer's last reference
	// The killed process's mark: it had let its own reference go (it saw no retain), and the
	// peer's retain landed before the mark, which it would have backed off.
	st := c.entry(int(h.Entry)) + eState
	if !c.cas(st, packState(h.Gen, eLive), packState(h.Gen, eLive|eRetiring)) {
		t.Fatalf("entry state %#x", c.load(st))
	}

	scan := func() {
		w.drainMu.Lock()
		w.scanRetired()
		w.drainMu.Unlock()
	}
	scan()
	pb, err := p.Bytes(h)
	must(t, "Bytes of the retained buffer after its holder's scan", err)
	checkSeq(t, pb, 7)
	x, err := w.Alloc(4096)
	must(t, "Alloc", err)
	if &x[0] == &b[0] {
		t.Fatal("a buffer another process retains was allocated again")
	}
	must(t, "Free", w.Free(x))

	must(t, "Release", p.Release(h))
	scan()
	if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
		t.Errorf("the buffer after its last release and its holder's scan: %v", err)
	}
}
