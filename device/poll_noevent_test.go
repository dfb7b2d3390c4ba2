package device

import (
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakePollNoEventKeepsUnseenCapture: an Alloc's poll gives the frees deferred on a busy
// stream an event; when the driver cannot make one (cuEventCreate refused), the stream was not
// asked and is not refused: its frees wait for a later poll, and the heap synchronizes nothing.
// Before, the poll took the stream for one the driver refuses (destroyed) and answered it with a
// synchronize of the context, which waited for all the context's work and ended a capture of
// the user's on a stream the heap never saw (StreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
// where the heap synchronizes the context only for a stream destroyed before its ForgetStream.
func TestFakePollNoEventKeepsUnseenCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b, c := newStream(t, dev, h), newStream(t, dev, h), newStream(t, dev, h)
	user, err := dev.StreamCreate(true) // never seen by the heap
	must(t, "StreamCreate", err)
	t.Cleanup(func() { must(t, "StreamDestroy", dev.StreamDestroy(user)) })
	p, q, keep := alloc(t, h, 4096, a), alloc(t, h, 4096, a), alloc(t, h, 4096, a)
	f.Hold(true)
	defer f.Complete()
	// Two busy streams with frees: the heap's one idle event (its checks') serves the first
	// point, the second needs a new one.
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(p), 1, 4096, pcuda.Stream(b)))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	must(t, "MemsetAsync on c", h.MemsetAsync(pcuda.DevicePtr(q), 1, 4096, pcuda.Stream(c)))
	must(t, "FreeAsync on c", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(c)))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(user, cuda.CaptureRelaxed))
	f.FailAfter(fakecuda.CallEventCreate, 0, fakecuda.ResultOutOfMemory)
	r := alloc(t, h, 4096, a) // polls
	g, err := dev.StreamEndCapture(user)
	if err != nil {
		t.Fatalf("an Alloc whose poll got no event ended the user's capture: %v", err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	if st := h.Stats(); st.Deferred != 2 {
		t.Errorf("after the poll with no event, %d frees deferred; want 2 (b's, c's: still queued)", st.Deferred)
	}
	f.Hold(false)
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Deferred != 0 {
		t.Errorf("after Sync: %d frees deferred, want 0", st.Deferred)
	}
	freeAll(t, h, []cuda.DevicePtr{keep, r})
}
