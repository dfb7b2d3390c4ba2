package pinned_test

import (
	"errors"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeForgetStreamDriverError: ForgetStream whose wait the driver refuses (here the
// context's sticky error, left by a gather kernel that faulted) returns the driver's error, as
// its doc says, matching this package's ErrDeviceFault as Trim's does; it matched no sentinel of
// the package, so a caller could not tell it from the others with errors.Is. The stream stays
// known, and the buffer freed on it waits; once the context is usable again, ForgetStream
// takes it back.
func TestFakeForgetStreamDriverError(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	d := r.freeBehindCopy()
	release := r.faultKernel(d)

	r.f.Hold(false) // the queries answer with the sticky error, held or not
	err := r.pool.ForgetStream(pubcuda.Stream(r.s))
	var res cuda.Result
	if !errors.As(err, &res) || res != fakecuda.ResultIllegalAddress {
		t.Errorf("ForgetStream with the context's sticky error = %v; want the driver's error", err)
	}
	if !errors.Is(err, pinned.ErrDeviceFault) || errors.Is(err, pinned.ErrInvalidStream) {
		t.Errorf("ForgetStream with the context's sticky error = %v; want an error matching ErrDeviceFault", err)
	}
	if st := r.pool.Stats(); st.Deferred != 1 {
		t.Errorf("%d buffers deferred after the failed ForgetStream, want the one freed on the stream", st.Deferred)
	}

	r.f.ClearStickyError()
	ok(t, "ForgetStream", r.pool.ForgetStream(pubcuda.Stream(r.s)))
	if st := r.pool.Stats(); st.Deferred != 0 || st.Live != 0 {
		t.Errorf("after ForgetStream: %d deferred, %d live", st.Deferred, st.Live)
	}
	release()
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
