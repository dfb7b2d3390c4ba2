package pinned_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// A Free of a shared buffer that a Hold keeps waits for the Release, on every free path:
// ZeroOnFree (the guarded path) and plain. The Free that drops the last reference must not
// give the buffer back while the hold's transfer still uses it.
func TestFakeSharedHeldFreeWaitsForRelease(t *testing.T) {
	for _, o := range []pinned.Options{{}, {ZeroOnFree: true}, {Quota: 8 << 20}} {
		s := newRefSharer()
		o.Sharer = s
		r := newAsyncRig(t, o)
		if r == nil {
			return
		}
		b := r.alloc(4096, 9)
		s.share(t, r.pool, b, 1)
		h, err := r.pool.Hold(b)
		ok(t, "Hold", err)
		ok(t, "Free", r.pool.Free(b)) // the last reference, but held: waits for the Release
		if st := r.pool.Stats(); st.Live != 1 {
			t.Fatalf("%+v: a held shared buffer's last free gave it back before the Release: %d live", o, st.Live)
		}
		for i := 0; i < 64; i++ {
			c, err := r.pool.Alloc(4096)
			ok(t, "Alloc", err)
			if mem.Addr(c) == mem.Addr(b) {
				t.Fatalf("%+v: a held buffer was handed out again before its Release", o)
			}
			defer r.pool.Free(c)
		}
		if b[0] != 9 {
			t.Fatalf("%+v: a held buffer was scrubbed before its Release", o)
		}
		ok(t, "Release", h.Release())
		if err := r.pool.Trim(); err != nil {
			t.Fatal(err)
		}
		if st := r.pool.Stats(); st.Live != 64 {
			t.Fatalf("%+v: after the Release: %d live, want 64", o, st.Live)
		}
	}
}
