package pinned

import (
	"errors"
	"testing"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeForgetStreamRacingRelease: a ForgetStream on a closed pool that passed its look at
// the release while the Free of the last live buffer released the pool's memory (its events
// and its device with it) went on to ask the released device about the stream, and returned
// the driver's refusals as an ErrInvalidStream ("its wait failed, and so did the synchronize
// of the context") where the doc says ErrClosed.
func TestFakeForgetStreamRacingRelease(t *testing.T) {
	r := newForgetRig(t)
	if r == nil {
		return
	}
	s := r.stream(true)
	b := r.alloc(4096, 1)
	r.ok("RecordStream", r.p.RecordStream(b, s))
	if err := r.p.Close(); !errors.Is(err, ErrLiveBlocks) {
		t.Fatalf("Close with a buffer live: %v, want ErrLiveBlocks", err)
	}
	ran := false
	defer func() { forgetFlushed = nil }()
	forgetFlushed = func() {
		forgetFlushed, ran = nil, true
		r.ok("Free", r.p.Free(b)) // the last live buffer: the memory goes
		if !r.p.released.Load() {
			t.Error("the Free of the last live buffer of a closed pool did not release its memory")
		}
	}
	err := r.p.ForgetStream(s)
	if !ran {
		t.Fatal("ForgetStream did not flush the caches")
	}
	if !errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidStream) {
		t.Errorf("ForgetStream racing the release of the pool's memory: %v, want ErrClosed", err)
	}
	r.ok("StreamDestroy", r.dev.StreamDestroy(icuda.Stream(s)))
}
