package pinned_test

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeForgetStreamFailedKeepsRecord: a buffer recorded on stream s (an HtoDAsync from it, still
// queued; s's list, empty, left the lists at two reclaims), then a ForgetStream of s that fails (s
// captures a graph: the pool can neither query nor synchronize it). The failed ForgetStream used to
// mark s forgotten all the same, so the buffer's later Free took it back at once and the next Alloc
// handed it out with the copy still queued: the device got the next owner's bytes. It also
// synchronized the context after the refused wait, which invalidated the user's capture. Now it
// refuses (cuda.ErrCapturing) and leaves s known.
func TestFakeForgetStreamFailedKeepsRecord(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	const n = 4096
	d := r.devAlloc(n)
	a := r.alloc(n, 0xA1)
	r.f.Hold(true) // the copy stays queued
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, pubcuda.Stream(r.s)))
	r.pool.Stats() // two reclaims find s's list empty: it leaves the lists (the record stays)
	r.pool.Stats()
	if n := pinned.StreamLists(r.pool); n != 0 {
		t.Fatalf("%d stream lists after two reclaims, want 0", n)
	}
	runtime.LockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(r.s, cuda.CaptureGlobal))
	ferr := r.pool.ForgetStream(pubcuda.Stream(r.s))
	g, cerr := r.dev.StreamEndCapture(r.s)
	runtime.UnlockOSThread()
	if cerr != nil {
		t.Errorf("ForgetStream invalidated the user's capture: %v", cerr)
	} else {
		ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	}
	if !errors.Is(ferr, pubcuda.ErrCapturing) {
		t.Errorf("ForgetStream during a capture of its stream: %v, want an error matching cuda.ErrCapturing", ferr)
	}
	ok(t, "Free", r.pool.Free(a))
	if n := r.deferred(); n != 1 {
		t.Errorf("Free of a buffer whose copy is queued, after the failed ForgetStream: %d deferred, want 1", n)
	}
	var next [][]byte // the next owners, who write their bytes: up to the one handed a's memory
	for range 256 {
		b := r.alloc(n, 0xB2)
		next = append(next, b)
		if mem.Addr(b) == mem.Addr(a) {
			break
		}
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if got := r.read(d, n); !bytes.Equal(got, bytes.Repeat([]byte{0xA1}, n)) {
		t.Fatalf("the device got the next owner's bytes (ForgetStream failed with %v, then the buffer's Free took it back at once)", ferr)
	}
	for _, b := range next {
		ok(t, "Free", r.pool.Free(b))
	}
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
