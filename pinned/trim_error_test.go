package pinned_test

import (
	"errors"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeTrimReportsDriverError: Trim returns the driver's error when it cannot tell whether a
// stream has passed the buffers freed on it (here the context's sticky error, left by a gather
// kernel that faulted), as device.Heap.Trim does, matching ErrDeviceFault (it matched no sentinel
// of the package), and keeps those buffers waiting; Trim returned nothing and the error was
// lost. Once the context is usable again, Trim takes them back.
func TestFakeTrimReportsDriverError(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	d := r.freeBehindCopy()
	release := r.faultKernel(d)

	r.f.Hold(false) // the queries answer with the sticky error, held or not
	err := r.pool.Trim()
	var res cuda.Result
	if !errors.As(err, &res) || res != fakecuda.ResultIllegalAddress {
		t.Errorf("Trim with the context's sticky error = %v; want the driver's error", err)
	}
	if !errors.Is(err, pinned.ErrDeviceFault) {
		t.Errorf("Trim with the context's sticky error = %v; want an error matching ErrDeviceFault", err)
	}
	if st := r.pool.Stats(); st.Deferred != 1 {
		t.Errorf("%d buffers deferred after the failed Trim, want the one freed on the stream", st.Deferred)
	}

	r.f.ClearStickyError()
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	ok(t, "Trim", r.pool.Trim())
	if st := r.pool.Stats(); st.Deferred != 0 || st.Live != 0 {
		t.Errorf("after Trim: %d deferred, %d live", st.Deferred, st.Live)
	}
	release()
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
