package pinned_test

import (
	"runtime"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeCaptureKeepsFreeAsync: a buffer freed on stream s behind a copy still queued, while
// the user captures a graph on s: the pool's polls (Stats, Trim) keep it deferred and leave the
// capture valid (a query of s would invalidate it); once the capture ends and s has run, it
// comes back.
func TestFakeCaptureKeepsFreeAsync(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	d := r.freeBehindCopy()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(r.s, cuda.CaptureGlobal))
	deferred := r.deferred()
	trimErr := r.pool.Trim()
	g, err := r.dev.StreamEndCapture(r.s)
	if err != nil {
		t.Fatalf("the pool invalidated the user's capture: %v", err)
	}
	ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	ok(t, "Trim during the capture", trimErr)
	if deferred != 1 {
		t.Errorf("a poll during the capture: %d deferred, want 1", deferred)
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if n := r.deferred(); n != 0 {
		t.Errorf("after the capture: %d deferred, want 0", n)
	}
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
