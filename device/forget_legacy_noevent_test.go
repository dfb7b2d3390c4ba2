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

// TestFakeForgetLegacyNoEventKeepsUnseenCapture: ForgetStream of the legacy default stream waits
// for a point it records there (streamq's WaitPoint: the legacy stream's work comes after every
// blocking stream's). When the driver cannot make the event for it (cuEventCreate refused), the
// stream was not asked and is not refused: ForgetStream waits for nothing, keeps the legacy
// stream's heap and memory, and says so with streamq.ErrNoEvent (pinmalloc.ErrRefused;
// ErrOutOfMemory when memory ran out), "no event" said once; the capture of the user's on a
// stream the heap never saw goes on. ForgetStream again, with the driver making the event, forgets
// the stream. Before, the failed wait fell back to a synchronize of the context, which ended the
// capture (StreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), and ForgetStream returned nil.
func TestFakeForgetLegacyNoEventKeepsUnseenCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(ErrOutOfMemory, pinmalloc.ErrRefused) {
		h := newHeap(t, dev, Options{Capacity: 8 << 20, PurgeDelay: -1})
		user, err := dev.StreamCreate(true) // never seen by the heap
		must(t, "StreamCreate", err)
		p := alloc(t, h, 64<<10, 0) // the legacy stream is not asked: no event yet
		must(t, "Free", h.Free(pcuda.DevicePtr(p)))
		runtime.LockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(user, cuda.CaptureRelaxed))
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		err = h.ForgetStream(0)
		g, cerr := dev.StreamEndCapture(user)
		runtime.UnlockOSThread()
		if cerr != nil {
			t.Fatalf("ForgetStream of the legacy stream with cuEventCreate refused (%d) = %v, and ended the user's capture: %v", c.Code, err, cerr)
		}
		must(t, "GraphDestroy", dev.GraphDestroy(g))
		if !errors.Is(err, streamq.ErrNoEvent) || !errors.Is(err, c.Want) || strings.Count(err.Error(), "no event") != 1 {
			t.Errorf("ForgetStream of the legacy stream with cuEventCreate refused (%d) = %v; want streamq.ErrNoEvent and %v, \"no event\" said once", c.Code, err, c.Want)
		}
		if st := h.Stats(); st.Arena.ChunksInUse == 0 {
			t.Errorf("ForgetStream with cuEventCreate refused (%d) gave the legacy stream's memory back unwaited", c.Code)
		}
		must(t, "ForgetStream again", h.ForgetStream(0))
		if st := h.Stats(); st.Arena.ChunksInUse != 0 {
			t.Errorf("ForgetStream again left %d chunks in use", st.Arena.ChunksInUse)
		}
		must(t, "StreamDestroy", dev.StreamDestroy(user))
	}
}
