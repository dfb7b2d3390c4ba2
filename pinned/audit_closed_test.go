package pinned_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeWaitStreamsAfterRelease: once the pool's memory is released, WaitStreams says
// ErrClosed, as RecordStream, Hold and ForgetStream do. It used to look the address up in the
// closed arena and say ErrNotOwned ("outside the arena").
func TestFakeWaitStreamsAfterRelease(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	b := r.alloc(4096, 1)
	ok(t, "Free", r.pool.Free(b))
	ok(t, "Close", r.pool.Close())
	if err := r.pool.WaitStreams(b); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("WaitStreams after the release: %v, want ErrClosed", err)
	}
	if err := r.pool.RecordStream(b, 0); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("RecordStream after the release: %v, want ErrClosed", err)
	}
}
