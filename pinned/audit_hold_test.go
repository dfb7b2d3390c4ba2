package pinned_test

import (
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeHoldFreeAsyncForgottenStream: a held buffer freed with FreeAsync on stream s (its free
// waits for the hold), then s forgotten (ForgetStream: s has passed its work) and destroyed,
// then the hold released. The Release used to do the FreeAsync on the destroyed handle: the
// driver refused it, Release failed, and the buffer stayed held for good, counted live, so the
// pool could not close.
func TestFakeHoldFreeAsyncForgottenStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	a := r.alloc(4096, 0xA1)
	h, err := r.pool.Hold(a)
	ok(t, "Hold", err)
	ok(t, "FreeAsync", r.pool.FreeAsync(a, pubcuda.Stream(s)))
	ok(t, "ForgetStream", r.pool.ForgetStream(pubcuda.Stream(s)))
	ok(t, "StreamDestroy", r.dev.StreamDestroy(s))
	rerr := h.Release()
	_ = r.pool.Trim()
	if st := r.pool.Stats(); rerr != nil || st.Live != 0 {
		t.Fatalf("Release after the FreeAsync's stream was forgotten and destroyed: %v; %d live, %d deferred, want nil, 0 and 0", rerr, st.Live, st.Deferred)
	}
	r.finish()
}
