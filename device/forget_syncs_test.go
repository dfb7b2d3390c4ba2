package device

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeForgetDestroyedStreamSyncsOnce: ForgetStream of a stream destroyed with work queued
// synchronizes the context once: that one synchronize waits for the destroyed stream's work,
// and every later step of the call (its deferred frees, its heap's memory) is past it.
func TestFakeForgetDestroyedStreamSyncsOnce(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a := newStream(t, dev, h)
	s, _, _ := destroyedWithFrees(t, f, dev, h, a, 64<<10)
	before := f.Stat(fakecuda.CtxSyncs)
	must(t, "ForgetStream of the destroyed stream", h.ForgetStream(pcuda.Stream(s)))
	if n := f.Stat(fakecuda.CtxSyncs) - before; n != 1 {
		t.Errorf("ForgetStream of a destroyed stream synchronized the context %d times, want 1", n)
	}
}
