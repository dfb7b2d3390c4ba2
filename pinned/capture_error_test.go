package pinned_test

import (
	"errors"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeTrimSaysCaptureNotInvalidStream: a buffer freed on stream s, destroyed since without
// ForgetStream (its copy still queued), while the user captures a graph on r.s, a stream of
// the pool's. Trim cannot answer s with a synchronize of the context (it would end the
// capture): its error says so, matching cuda.ErrCapturing, as an Alloc's wait for the deferred
// buffers does. It matched ErrInvalidStream too (the reclaim's errors all got it), which says
// a stream the driver refuses, and a second Trim, whose error is the capture's refusal alone,
// did as well. Once the capture has ended, Trim takes the buffer back.
func TestFakeTrimSaysCaptureNotInvalidStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	const n = 4096
	d := r.devAlloc(n)
	r.f.Hold(true) // the copies stay queued
	k := r.alloc(n, 0xC)
	ok(t, "HtoDAsync on r.s", r.heap.HtoDAsync(pcuda.DevicePtr(d), k, pcuda.Stream(r.s)))
	ok(t, "FreeAsync on r.s", r.pool.FreeAsync(k, pcuda.Stream(r.s)))
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	b := r.alloc(n, 0xA)
	ok(t, "HtoDAsync", r.dev.MemcpyHtoDAsync(d, mem.Addr(b), n, s))
	ok(t, "FreeAsync", r.pool.FreeAsync(b, pcuda.Stream(s)))
	ok(t, "StreamDestroy, without ForgetStream", r.dev.StreamDestroy(s)) // its copy still queued
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(r.s, cuda.CaptureGlobal))
	var errs [2]error
	for i := range errs {
		errs[i] = r.pool.Trim()
	}
	deferred := r.deferred()
	g, cerr := r.dev.StreamEndCapture(r.s)
	if cerr != nil {
		t.Fatalf("Trim invalidated the user's capture: %v (Trims: %v)", cerr, errs)
	}
	ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	for i, err := range errs {
		if !errors.Is(err, pcuda.ErrCapturing) || errors.Is(err, pinned.ErrInvalidStream) {
			t.Errorf("Trim %d while a capture puts off the wait for a destroyed stream: %v; "+
				"want an error matching cuda.ErrCapturing and not ErrInvalidStream", i+1, err)
		}
	}
	if deferred != 2 {
		t.Errorf("after the Trims during the capture: %d deferred, want 2", deferred)
	}
	r.f.Hold(false)
	ok(t, "Trim once the capture has ended", r.pool.Trim())
	if st := r.pool.Stats(); st.Deferred != 0 {
		t.Errorf("after the capture: %d deferred, want 0", st.Deferred)
	}
	ok(t, "heap Free", r.heap.Free(pcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeWaitStreamsSaysCaptureNotInvalidStream: WaitStreams of a buffer recorded on r.s while
// the user captures a graph on r.s is refused (a synchronize would end the capture) with an
// error matching cuda.ErrCapturing; it matched ErrInvalidStream too, which says a stream the
// driver refuses. Once the capture has ended, the wait passes.
func TestFakeWaitStreamsSaysCaptureNotInvalidStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	b := r.alloc(4096, 0xB)
	ok(t, "RecordStream", r.pool.RecordStream(b, pcuda.Stream(r.s)))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(r.s, cuda.CaptureGlobal))
	werr := r.pool.WaitStreams(b)
	g, cerr := r.dev.StreamEndCapture(r.s)
	if cerr != nil {
		t.Fatalf("WaitStreams invalidated the user's capture: %v (WaitStreams: %v)", cerr, werr)
	}
	ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	if !errors.Is(werr, pcuda.ErrCapturing) || errors.Is(werr, pinned.ErrInvalidStream) {
		t.Errorf("WaitStreams of a buffer recorded on a capturing stream: %v; want an error "+
			"matching cuda.ErrCapturing and not ErrInvalidStream", werr)
	}
	ok(t, "WaitStreams once the capture has ended", r.pool.WaitStreams(b))
	ok(t, "Free", r.pool.Free(b))
	r.finish()
}
