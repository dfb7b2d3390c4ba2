package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// perThread is CU_STREAM_PER_THREAD, the handle of the calling thread's default stream.
const perThread cuda.Stream = 2

// TestPerThreadDefaultStream: the per-thread default stream (CU_STREAM_PER_THREAD, handle 2)
// is not the legacy stream (D, stream-sync-behavior: it "is not a non-blocking stream and will
// synchronize with the legacy default stream", and is "local to both the thread and the
// CUcontext"; it does not synchronize with other streams, as an explicitly created blocking
// stream does not): a synchronize of it does not run a blocking stream's earlier work, a
// blocking stream's synchronize does not run its earlier work, it waits for the legacy stream
// and the legacy stream for it, and another thread's handle 2 names another stream.
func TestPerThreadDefaultStream(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	runtime.LockOSThread() // handle 2 names this thread's stream throughout
	defer runtime.UnlockOSThread()
	x := newAsyncFixture(t, f, d, 4096)
	defer f.Hold(false)

	must(t, "MemsetD8Async on a blocking stream", d.MemsetD8Async(x.dev, 1, x.n, x.blk))
	must(t, "MemsetD8Async on the per-thread stream", d.MemsetD8Async(x.dev2, 2, x.n, perThread))
	must(t, "StreamSynchronize of the per-thread stream", d.StreamSynchronize(perThread))
	f.Hold(true)
	wantErr(t, "StreamQuery of the blocking stream after the per-thread stream's synchronize",
		d.StreamQuery(x.blk), pinmalloc.ErrNotReady)
	f.Hold(false)
	must(t, "StreamSynchronize of the blocking stream", d.StreamSynchronize(x.blk))

	must(t, "MemsetD8Async on the per-thread stream", d.MemsetD8Async(x.dev2, 3, x.n, perThread))
	must(t, "MemsetD8Async on a blocking stream", d.MemsetD8Async(x.dev, 4, x.n, x.blk))
	must(t, "StreamSynchronize of the blocking stream", d.StreamSynchronize(x.blk))
	f.Hold(true)
	wantErr(t, "StreamQuery of the per-thread stream after a blocking stream's synchronize",
		d.StreamQuery(perThread), pinmalloc.ErrNotReady)
	f.Hold(false)
	must(t, "StreamSynchronize of the per-thread stream", d.StreamSynchronize(perThread))

	// With the legacy stream it synchronizes both ways.
	must(t, "MemsetD8Async on the legacy stream", d.MemsetD8Async(x.dev, 5, x.n, 0))
	must(t, "MemsetD8Async on the per-thread stream", d.MemsetD8Async(x.dev2, 6, x.n, perThread))
	must(t, "StreamSynchronize of the per-thread stream", d.StreamSynchronize(perThread))
	f.Hold(true)
	must(t, "StreamQuery of the legacy stream after the per-thread stream's synchronize",
		d.StreamQuery(0))
	f.Hold(false)
	must(t, "MemsetD8Async on the per-thread stream", d.MemsetD8Async(x.dev2, 7, x.n, perThread))
	must(t, "MemsetD8Async on the legacy stream", d.MemsetD8Async(x.dev, 8, x.n, 0))
	must(t, "StreamSynchronize of the legacy stream", d.StreamSynchronize(0))
	f.Hold(true)
	must(t, "StreamQuery of the per-thread stream after the legacy stream's synchronize",
		d.StreamQuery(perThread))

	// Another thread's handle 2 is its own stream: this thread's held work is not its work.
	must(t, "MemsetD8Async on the per-thread stream", d.MemsetD8Async(x.dev2, 9, x.n, perThread))
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // another thread than the test's, and unlocked: it exits
		done <- d.StreamQuery(perThread)
	}()
	must(t, "StreamQuery of another thread's per-thread stream", <-done)
	wantErr(t, "StreamQuery of this thread's per-thread stream", d.StreamQuery(perThread),
		pinmalloc.ErrNotReady)
	f.Hold(false)
	must(t, "StreamSynchronize of the per-thread stream", d.StreamSynchronize(perThread))
	if !x.devHolds(t, x.dev2, 9) {
		t.Error("the per-thread stream's work did not run")
	}
	wantErr(t, "StreamDestroy of the per-thread stream", d.StreamDestroy(perThread),
		pinmalloc.ErrInvalidHandle)
}
