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

// TestFakeAllocWaitNoEventKeepsUnseenCapture: an Alloc the pool refuses for want of memory while
// buffers wait for their streams waits for those streams (a drain); a buffer deferred on the
// legacy default stream is waited for with a point recorded there (streamq's WaitPoint). When
// the driver cannot make the event for it (cuEventCreate refused), the stream was not asked and
// is not refused: the buffer stays deferred, and the Alloc's error says so with
// streamq.ErrNoEvent ("no event" said once; ErrRefused, or ErrOutOfMemory where memory ran out);
// the capture of the user's on a stream the pool never saw goes on. Before, the drain kept the
// legacy stream's list for a synchronize of the context, as for a stream the driver refuses, and
// that synchronize ended the capture (StreamEndCapture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).
func TestFakeAllocWaitNoEventKeepsUnseenCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(pinned.ErrOutOfMemory, pinned.ErrRefused) {
		p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 8 << 20, PurgeDelay: -1})
		user, err := dev.StreamCreate(true) // never seen by the pool
		ok(t, "StreamCreate", err)
		b, err := p.Alloc(4 << 20)
		ok(t, "Alloc", err)
		ok(t, "RecordStream on the legacy stream", p.RecordStream(b, pubcuda.Stream(0))) // asks nothing
		ok(t, "Free", p.Free(b))                                                         // deferred on the legacy stream
		d, err := dev.MemAlloc(4096)
		ok(t, "MemAlloc", err)
		f.Hold(true) // the legacy stream stays busy
		ok(t, "MemsetD8Async on the legacy stream", dev.MemsetD8Async(d, 1, 4096, 0))
		if st := p.Stats(); st.Deferred != 1 { // its reclaim gives the buffer a point: the pool's one event
			t.Fatalf("%d deferred, want 1", st.Deferred)
		}
		runtime.LockOSThread()
		ok(t, "StreamBeginCapture", dev.StreamBeginCapture(user, cuda.CaptureRelaxed))
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		_, err = p.Alloc(6 << 20)
		g, cerr := dev.StreamEndCapture(user)
		runtime.UnlockOSThread()
		if cerr != nil {
			t.Fatalf("Alloc with cuEventCreate refused (%d) = %v, and ended the user's capture: %v", c.Code, err, cerr)
		}
		ok(t, "GraphDestroy", dev.GraphDestroy(g))
		if !errors.Is(err, streamq.ErrNoEvent) || !errors.Is(err, c.Want) || strings.Count(err.Error(), "no event") != 1 {
			t.Errorf("Alloc with cuEventCreate refused (%d) = %v; want streamq.ErrNoEvent and %v, \"no event\" said once", c.Code, err, c.Want)
		}
		if st := p.Stats(); st.Deferred != 1 {
			t.Errorf("after the Alloc with cuEventCreate refused (%d): %d deferred, want 1", c.Code, st.Deferred)
		}
		f.Hold(false)
		ok(t, "Trim", p.Trim())
		if st := p.Stats(); st.Deferred != 0 {
			t.Errorf("after Trim: %d deferred, want 0", st.Deferred)
		}
		ok(t, "MemFree", dev.MemFree(d))
		ok(t, "StreamDestroy", dev.StreamDestroy(user))
		closePool(t, f, p)
	}
}
