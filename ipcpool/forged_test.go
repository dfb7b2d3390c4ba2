package ipcpool

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// Words a peer forged in the control region: grant words naming slot 300 or another process,
// ring entries naming nothing or another's buffer, a ring whose tail runs 2^40 past its head,
// an export entry moved elsewhere. No process panics, no free goes into another's ring or
// frees another's buffer, and every buffer stays intact.
func TestForgedControlWords(t *testing.T) {
	w, path := serveTest(t, Options{Size: 16 << 20, GrantSize: 2 << 20, RingSize: 8})
	p := attachTest(t, path, AttachOptions{})
	q := attachTest(t, path, AttachOptions{})
	c := &w.c
	keep, err := p.Alloc(3000) // p's own buffer, never shared: nothing may free it
	must(t, "Alloc", err)
	fill(keep, 11)
	qb, err := q.Alloc(3000) // q's shared buffer: nothing of p's may reach it
	must(t, "Alloc", err)
	fill(qb, 12)
	qh, err := q.Handle(qb)
	must(t, "Handle", err)

	for _, slot := range []int{299, 20, q.slot} {
		for g := range w.grants() {
			c.store(c.grantWord(g), packGrant(uint64(g), 0, slot))
		}
		b, err := p.Alloc(64)
		must(t, "Alloc", err)
		h, err := p.Handle(b)
		must(t, "Handle", err)
		ob, err := w.Bytes(h)
		must(t, "Bytes", err)
		must(t, "owner Free of p's buffer with forged grant words", w.Free(ob))
		if c.pending(w.slot, q.slot) {
			t.Fatalf("grant words naming slot %d sent the owner's free into q's ring", slot)
		}
		waitFor(t, func() bool { p.Collect(); return p.Pool.Stats().Live == 1 })
	}
	// Ring entries that name nothing (or q's entry, in p's ring): dropped and counted.
	r := rand.New(rand.NewPCG(1, 2))
	dropped := p.SharedStats().Dropped
	for range 6 {
		e := packRing(1<<20+r.IntN(1<<20), r.Uint32()) // an index p never used
		if r.IntN(2) == 0 {
			// q's entry, in p's ring: p's entry of that index, at a generation it never had.
			e = packRing(int(qh.Entry)%w.exports, entryGen(c.load(c.entry(p.slot*w.exports+int(qh.Entry)%w.exports)))+1000)
		}
		if !c.push(w.slot, p.slot, e) {
			t.Fatal("ring full")
		}
	}
	p.Collect()
	if got := p.SharedStats().Dropped - dropped; got != 6 {
		t.Fatalf("%d forged ring entries dropped, want 6", got)
	}
	// A tail 2^40 past the head: at most a ring's worth is read, all dropped.
	rg := c.ring(w.slot, p.slot)
	c.store(rg+lineWords, c.load(rg)+1<<40)
	dropped = p.SharedStats().Dropped
	p.Collect()
	if got := p.SharedStats().Dropped - dropped; got > uint64(w.ringCap) {
		t.Fatalf("%d entries read from a ring of %d", got, w.ringCap)
	}
	c.store(rg, c.load(rg+lineWords)) // empty again (as p's drain left it)
	// An export entry moved elsewhere: its handle is refused, not read at the new place.
	qe := c.entry(int(qh.Entry))
	c.store(qe+eOffset, c.load(qe+eOffset)+4096)
	if _, err := p.Bytes(qh); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("Bytes of a handle whose entry was moved: %v", err)
	}
	c.store(qe+eOffset, qh.Offset)
	must(t, "verify keep", verify(keep, 11))
	must(t, "verify q's buffer", verify(qb, 12))
	if st := p.Pool.Stats(); st.Live != 1 {
		t.Fatalf("p has %d live buffers, want its one", st.Live)
	}
	must(t, "Free", p.Free(keep))
	must(t, "Free", q.Free(qb))
}
