package device

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestFakeSyncNoEventKeepsUnseenCapture: Sync waits for the frees deferred on the legacy default
// stream with a point it records there (streamq's Drain, WaitStream). When the driver cannot make
// the event for it (cuEventCreate refused), the stream was not asked and is not refused: Sync
// waits for nothing, keeps the free deferred, and says so with streamq.ErrNoEvent
// (pinmalloc.ErrRefused; ErrOutOfMemory when memory ran out), "no event" said once; the capture
// of the user's on a stream the heap never saw goes on. Sync again, with the driver making the
// event, does the free. Before, the drain kept the legacy stream's list for a synchronize of the
// context, as for a stream the driver refuses, and that synchronize ended the capture
// (StreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).
func TestFakeSyncNoEventKeepsUnseenCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(ErrOutOfMemory, pinmalloc.ErrRefused) {
		h := newHeap(t, dev, Options{Capacity: 8 << 20, PurgeDelay: -1})
		user, err := dev.StreamCreate(true) // never seen by the heap
		must(t, "StreamCreate", err)
		a := newStream(t, dev, h) // its check makes the heap's one event, idle after it
		p := alloc(t, h, 64<<10, a)
		f.Hold(true) // the legacy stream stays busy
		must(t, "MemsetAsync on the legacy stream", h.MemsetAsync(pcuda.DevicePtr(p), 1, 64<<10, 0))
		must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(p), 0))
		r := alloc(t, h, 64<<10, a) // its poll gives the free a point: the idle event
		runtime.LockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(user, cuda.CaptureRelaxed))
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		err = h.Sync()
		g, cerr := dev.StreamEndCapture(user)
		runtime.UnlockOSThread()
		if cerr != nil {
			t.Fatalf("Sync with cuEventCreate refused (%d) = %v, and ended the user's capture: %v", c.Code, err, cerr)
		}
		must(t, "GraphDestroy", dev.GraphDestroy(g))
		if !errors.Is(err, streamq.ErrNoEvent) || !errors.Is(err, c.Want) || strings.Count(err.Error(), "no event") != 1 {
			t.Errorf("Sync with cuEventCreate refused (%d) = %v; want streamq.ErrNoEvent and %v, \"no event\" said once", c.Code, err, c.Want)
		}
		f.Hold(false)
		must(t, "Sync again", h.Sync())
		if st := h.Stats(); st.Deferred != 0 {
			t.Errorf("after Sync again: %d frees deferred, want 0", st.Deferred)
		}
		freeAll(t, h, []cuda.DevicePtr{r})
		must(t, "StreamDestroy", dev.StreamDestroy(user))
	}
}
