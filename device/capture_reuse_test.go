package device

import (
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeCaptureSameStreamFreeReused pins FreeAsync's rule during a capture: a block of s's
// own freed on s while s captures a CUDA graph is free at once, and the next Alloc on s, inside
// the capture, takes it (the graph runs the two uses in s's order: FreeAsync's documentation
// says why that is safe and what it asks of the graph's launch); a block of another stream's
// freed on s waits for the capture's end, as s's deferred frees do.
func TestFakeCaptureSameStreamFreeReused(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, s := newStream(t, dev, h), newStream(t, dev, h)
	const n = 64 << 10
	p, x := alloc(t, h, n, s), alloc(t, h, n, a)
	var q cuda.DevicePtr
	var deferred int
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(s, cuda.CaptureGlobal))
		for _, b := range []cuda.DevicePtr{p, x} { // captured: the graph's uses of them
			must(t, "MemsetAsync on s", h.MemsetAsync(pcuda.DevicePtr(b), 1, n, pcuda.Stream(s)))
			must(t, "FreeAsync on s", h.FreeAsync(pcuda.DevicePtr(b), pcuda.Stream(s)))
		}
		q = alloc(t, h, n, s)
		deferred = h.Stats().Deferred
		g, err := dev.StreamEndCapture(s)
		if err != nil {
			t.Fatalf("the heap invalidated the user's capture: %v", err)
		}
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}()
	if q != p || deferred != 1 {
		t.Errorf("during the capture: s's Alloc got %#x (s's block freed on s: %#x), %d frees deferred; want s's block, 1 (a's block, freed on s)", q, p, deferred)
	}
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Deferred != 0 || st.Live != 1 {
		t.Errorf("after the capture: %d deferred, %d live; want 0, 1", st.Deferred, st.Live)
	}
	freeAll(t, h, []cuda.DevicePtr{q})
}
