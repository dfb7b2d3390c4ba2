package pinned_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/copyengine"
	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeTrimReportsDriverError: Trim returns the driver's error when it cannot tell whether a
// stream has passed the buffers freed on it (here the context's sticky error, left by a gather
// kernel that faulted), as device.Heap.Trim does, and keeps those buffers waiting; Trim returned
// nothing and the error was lost. Once the context is usable again, Trim takes them back.
func TestFakeTrimReportsDriverError(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	d := r.freeBehindCopy()

	unmapped, err := r.dev.MemHostAlloc(1<<16, 0) // pinned, not mapped for the device
	ok(t, "MemHostAlloc", err)
	kb, err := copyengine.New(public(r.dev), copyengine.Options{Method: copyengine.MethodKernel})
	ok(t, "copyengine.New", err)
	side := r.stream()
	ok(t, "Copy of a job that faults", kb.Copy([]copyengine.Job{{Dst: pubcuda.DevicePtr(d), Src: pubcuda.DevicePtr(unmapped), Len: 64}}, pubcuda.Stream(side)))
	if err := r.dev.StreamSynchronize(side); err == nil || r.f.StickyError() == 0 {
		t.Fatalf("the faulting kernel left no sticky error: %v", err)
	}

	r.f.Hold(false) // the queries answer again: with the sticky error
	err = r.pool.Trim()
	var res cuda.Result
	if !errors.As(err, &res) || res != fakecuda.ResultIllegalAddress {
		t.Errorf("Trim with the context's sticky error = %v; want the driver's error", err)
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
	ok(t, "Batcher Close", kb.Close())
	ok(t, "MemFreeHost", r.dev.MemFreeHost(unmapped))
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
