package pinned_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeForgetLegacyNoEventKeepsUnseenCapture: ForgetStream of the legacy default stream waits
// for a point it records there (streamq's WaitPoint: the legacy stream's work comes after every
// blocking stream's). When the driver cannot make the event for it (cuEventCreate refused), the
// stream was not asked and is not refused: ForgetStream waits for nothing, keeps the buffer
// deferred on the legacy stream (busy: the fake holds its work), and says so with streamq.ErrNoEvent (ErrRefused; ErrOutOfMemory
// when memory ran out), "no event" said once; the capture of the user's on a stream the pool never
// saw goes on. ForgetStream again, with the driver making the event, takes the buffer back.
// Before, the failed wait fell back to a synchronize of the context, which ended the capture
// (StreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).
func TestFakeForgetLegacyNoEventKeepsUnseenCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(pinned.ErrOutOfMemory, pinned.ErrRefused) {
		p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 8 << 20, PurgeDelay: -1})
		user, err := dev.StreamCreate(true) // never seen by the pool
		ok(t, "StreamCreate", err)
		b, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		ok(t, "RecordStream on the legacy stream", p.RecordStream(b, pubcuda.Stream(0))) // asks nothing
		ok(t, "Free", p.Free(b))                                                         // deferred on the legacy stream
		d, err := dev.MemAlloc(4096)
		ok(t, "MemAlloc", err)
		f.Hold(true) // the legacy stream stays busy: no reclaim (Stats's) takes the buffer back
		ok(t, "MemsetD8Async on the legacy stream", dev.MemsetD8Async(d, 1, 4096, 0))
		runtime.LockOSThread()
		ok(t, "StreamBeginCapture", dev.StreamBeginCapture(user, cuda.CaptureRelaxed))
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		err = p.ForgetStream(0)
		g, cerr := dev.StreamEndCapture(user)
		runtime.UnlockOSThread()
		if cerr != nil {
			t.Fatalf("ForgetStream of the legacy stream with cuEventCreate refused (%d) = %v, and ended the user's capture: %v", c.Code, err, cerr)
		}
		ok(t, "GraphDestroy", dev.GraphDestroy(g))
		if !errors.Is(err, streamq.ErrNoEvent) || !errors.Is(err, c.Want) || errors.Is(err, pinned.ErrInvalidStream) ||
			strings.Count(err.Error(), "no event") != 1 {
			t.Errorf("ForgetStream of the legacy stream with cuEventCreate refused (%d) = %v; want streamq.ErrNoEvent and %v, not an invalid stream, \"no event\" said once",
				c.Code, err, c.Want)
		}
		if st := p.Stats(); st.Deferred != 1 {
			t.Errorf("after ForgetStream with cuEventCreate refused (%d): %d deferred, want 1", c.Code, st.Deferred)
		}
		f.Hold(false)
		ok(t, "ForgetStream again", p.ForgetStream(0))
		if st := p.Stats(); st.Deferred != 0 {
			t.Errorf("after ForgetStream again: %d deferred, want 0", st.Deferred)
		}
		ok(t, "MemFree", dev.MemFree(d))
		ok(t, "StreamDestroy", dev.StreamDestroy(user))
		closePool(t, f, p)
	}
}
