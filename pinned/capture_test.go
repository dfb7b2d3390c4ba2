package pinned_test

import (
	"errors"
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

// TestFakeReclaimBesideCapture: a buffer freed on stream s behind a copy, while the user's
// thread captures a graph in the default GLOBAL mode on a stream of its own: the pool's polls
// of s on other goroutines (Stats, Trim) query its events, which the driver counts among the
// potentially unsafe calls such a capture prohibits on every thread. They run in the RELAXED
// mode, so the buffer comes back once s has run, and the capture stays valid. They were
// refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidated the user's capture.
func TestFakeReclaimBesideCapture(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	d := r.freeBehindCopy()
	user := r.stream()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(user, cuda.CaptureGlobal))
	type polled struct {
		before, after uint64
		err           error
	}
	done := make(chan polled)
	go func() { // another thread than the capture's
		var p polled
		p.before = r.deferred()
		r.f.Hold(false) // the copy runs at the next poll
		p.err = r.pool.Trim()
		p.after = r.deferred()
		done <- p
	}()
	p := <-done
	g, err := r.dev.StreamEndCapture(user)
	if err != nil {
		t.Fatalf("the pool's polls invalidated the user's capture: %v", err)
	}
	ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	ok(t, "Trim beside the capture", p.err)
	if p.before != 1 || p.after != 0 {
		t.Errorf("deferred before and after the copy ran: %d, %d; want 1, 0", p.before, p.after)
	}
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeAllocSaysCaptureHoldsDeferred: the pool's whole capacity is a buffer freed on stream s
// behind a copy still queued, and the user captures a graph on s. An Alloc that needs that memory
// cannot wait for s (a synchronize would end the capture): it fails, and its error says why
// (cuda.ErrCapturing) beside the out-of-memory. Before, the wait's capture refusal was dropped
// (streamq's Reclaim answered nil for the streams it could not wait for), and the error said
// only that the pool was out of memory.
func TestFakeAllocSaysCaptureHoldsDeferred(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1, Capacity: 4 << 20})
	if r == nil {
		return
	}
	const n = 3 << 20
	d := r.devAlloc(n)
	b := r.alloc(n, 7)
	r.f.Hold(true)
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(r.s)))
	ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(r.s, cuda.CaptureGlobal))
	_, aerr := r.pool.Alloc(n)
	g, err := r.dev.StreamEndCapture(r.s)
	if err != nil {
		t.Fatalf("the Alloc invalidated the user's capture: %v", err)
	}
	ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	if !errors.Is(aerr, pinned.ErrOutOfMemory) || !errors.Is(aerr, pubcuda.ErrCapturing) {
		t.Errorf("Alloc of the capacity held by a capturing stream's deferred buffer: %v; want ErrOutOfMemory and cuda.ErrCapturing", aerr)
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	c := r.alloc(n, 9) // the buffer came back
	ok(t, "Free", r.pool.Free(c))
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
