package device

import (
	"errors"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeForgetStreamReturnsItsOwn: ForgetStream(t) returns t's outcome, not that of a free
// parked earlier for another reason. With Options.ZeroOnFree, a held block's Free whose memset
// the driver refused at its last Release (a blocking stream c capturing) waits parked for a
// synchronize of the context; a poll makes one (its answer to a stream destroyed without
// ForgetStream), and c captures again, so the parked free's memset is refused again. Before,
// ForgetStream(t) of a stream t with nothing to do with it forgot t and returned that refusal,
// an error a caller takes for t's own. Now it returns nil, and the parked free is still there,
// shown (Stats.Deferred), reported by Sync (cuda.ErrCapturing while c captures), and done once
// the capture has ended.
func TestFakeForgetStreamReturnsItsOwn(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, s, c := newStream(t, dev, h), newStream(t, dev, h), newBlockingStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	hd := heldBehind(t, f, h, p, n, s)
	must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
	capture := func(during func()) {
		t.Helper()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
		during()
		g, err := dev.StreamEndCapture(c)
		must(t, "StreamEndCapture", err)
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}
	capture(func() { must(t, "Release", hd.Release()) }) // the memset refused: the free parked
	// A poll's answer to a destroyed stream synchronizes the context: the parked free is passed.
	d, _, _ := destroyedWithFrees(t, f, dev, h, a, n)
	r := alloc(t, h, n, a)
	tt := newStream(t, dev, h)
	q := alloc(t, h, n, tt)
	must(t, "Free on t", h.Free(pcuda.DevicePtr(q))) // t has a heap: ForgetStream waits for t
	capture(func() {
		if err := h.ForgetStream(pcuda.Stream(tt)); err != nil {
			t.Errorf("ForgetStream(t) while another free is parked = %v; want nil (t's outcome)", err)
		}
		if st := h.Stats(); st.Deferred != 1 {
			t.Errorf("during the capture: %d deferred; want 1 (the parked free, kept)", st.Deferred)
		}
		if err := h.Sync(); !errors.Is(err, pcuda.ErrCapturing) {
			t.Errorf("Sync during the capture = %v; want the parked free's refusal (cuda.ErrCapturing)", err)
		}
	})
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Deferred != 0 || st.Live != 1 {
		t.Errorf("after Sync: %d deferred, %d live; want 0, 1", st.Deferred, st.Live)
	}
	must(t, "Verify", h.Verify())
	must(t, "ForgetStream of the destroyed stream", h.ForgetStream(pcuda.Stream(d)))
	freeAll(t, h, []cuda.DevicePtr{r})
}
