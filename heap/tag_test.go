package heap

import "testing"

// TestBlockTags checks the holder's words: a block's tag is its own (not its neighbour's), the
// same from FindFrom and Tag, zero until written, absent (nil) on a page never tagged, and a
// BlockRef's Hold refuses a block freed and handed out again with another size since it was
// found.
func TestBlockTags(t *testing.T) {
	h := newTestHeap(t, 64<<20, Options{})
	for _, n := range []uintptr{100, 300 << 10, 4 << 20} {
		p, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		q, err := h.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if h.g.Tag(p) != nil {
			t.Fatalf("a block of %d bytes on a page never tagged has a tag", n)
		}
		r, ok := h.g.FindFrom(p, n)
		if !ok {
			t.Fatalf("FindFrom of a live block of %d bytes", n)
		}
		tag := r.Tag()
		if tag.Load() != 0 || h.g.Tag(p) != tag {
			t.Fatalf("block of %d bytes: tag %#x, Tag %p, FindFrom's %p", n, tag.Load(), h.g.Tag(p), tag)
		}
		tag.Store(0x40)
		if tq := h.g.Tag(q); tq != nil && tq.Load() != 0 {
			t.Fatalf("a neighbour's tag reads %#x", tq.Load())
		}
		if h.g.Held(p) {
			t.Fatal("FindFrom held the block")
		}
		if first, ok := r.Hold(); !ok || !first || !h.g.Held(p) {
			t.Fatalf("BlockRef.Hold: first %v ok %v", first, ok)
		}
		if first, ok := r.Hold(); !ok || first {
			t.Fatalf("second BlockRef.Hold: first %v ok %v", first, ok)
		}
		tag.Store(0)
		if err := h.FreeHeld(p, n); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.Hold(); ok {
			t.Fatalf("BlockRef.Hold of a freed block of %d bytes", n)
		}
		if n == 100 { // the same block again, of another size: the old reference must not hold it
			if p2, err := h.Alloc(96); err != nil || p2 != p {
				t.Fatalf("Alloc(96) after the free: %#x, %v (want %#x)", p2, err, p)
			}
			if _, ok := r.Hold(); ok || h.g.Held(p) {
				t.Fatal("BlockRef.Hold of the block handed out again with another size")
			}
			if err := h.FreeSized(p, 96); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.FreeSized(q, n); err != nil {
			t.Fatal(err)
		}
	}
}
