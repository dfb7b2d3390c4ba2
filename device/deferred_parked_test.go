package device

import (
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeDeferredByStreamParkedFrees: with Options.ZeroOnFree, the frees of two held blocks
// whose memsets the driver refused at their last Release (a Free's on the legacy stream while a
// blocking stream c captures, a FreeAsync's on s while s captures) wait for a synchronize of the
// context, not for a stream: DeferredByStream shows them apart, as one entry Parked under stream
// 0. Before, the Free's showed under stream 0 as if it waited for the legacy stream, and the
// FreeAsync's under s as if s's next point would do it.
func TestFakeDeferredByStreamParkedFrees(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, s, c := newStream(t, dev, h), newStream(t, dev, h), newBlockingStream(t, dev, h)
	const n = 64 << 10
	p1, p2 := alloc(t, h, n, a), alloc(t, h, n, a)
	hd1, hd2 := heldBehind(t, f, h, p1, n, s), heldBehind(t, f, h, p2, n, s)
	must(t, "Free of a held block", h.Free(pcuda.DevicePtr(p1)))
	must(t, "FreeAsync on s of a held block", h.FreeAsync(pcuda.DevicePtr(p2), pcuda.Stream(s)))
	capture := func(on cuda.Stream, hd Hold) {
		t.Helper()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(on, cuda.CaptureGlobal))
		must(t, "Release", hd.Release()) // the memset refused: the free parked
		g, err := dev.StreamEndCapture(on)
		must(t, "StreamEndCapture", err)
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}
	capture(c, hd1)
	capture(s, hd2)
	want := []StreamDeferred{{Stream: 0, Blocks: 2, Bytes: 2 * n, Parked: true}}
	if got := h.DeferredByStream(); len(got) != 1 || got[0] != want[0] {
		t.Errorf("DeferredByStream = %+v; want %+v (both frees wait for the context, apart)", got, want)
	}
	if st := h.Stats(); st.Deferred != 2 {
		t.Errorf("Stats().Deferred = %d; want 2", st.Deferred)
	}
	must(t, "Sync", h.Sync())
	if got := h.DeferredByStream(); got != nil {
		t.Errorf("after Sync: DeferredByStream = %+v; want none", got)
	}
}
