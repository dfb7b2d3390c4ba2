package pinned_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeQuotaSaysFaultHoldsDeferred: the quota's room is a buffer freed with FreeAsync
// behind a copy still queued, and a kernel faults (the context's sticky error): no reclaim can
// say whether the stream passed the free. The Alloc the quota refuses must say why the buffer
// still waits (ErrDeviceFault beside ErrQuota, the reclaim's error said once); it counted the
// waiting buffer and dropped the reason, which only the next Trim said.
func TestFakeQuotaSaysFaultHoldsDeferred(t *testing.T) {
	const n = 4096
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1, Quota: n})
	if r == nil {
		return
	}
	d := r.freeBehindCopy()
	fd, err := r.dev.MemAlloc(4096)
	ok(t, "MemAlloc", err)
	release := r.faultKernel(fd)

	_, aerr := r.pool.Alloc(n)
	if !errors.Is(aerr, pinned.ErrQuota) || !errors.Is(aerr, pinned.ErrDeviceFault) {
		t.Errorf("Alloc the quota refuses while a fault holds a deferred buffer: %v; "+
			"want ErrQuota and ErrDeviceFault", aerr)
	} else if c := strings.Count(aerr.Error(), "deferred buffers: "); c != 1 {
		t.Errorf("Alloc's error says the reclaim's %d times, want once: %v", c, aerr)
	}
	if err := r.pool.Trim(); !errors.Is(err, pinned.ErrDeviceFault) {
		t.Errorf("Trim after the refused Alloc: %v; want ErrDeviceFault", err)
	}
	if st := r.pool.Stats(); st.Deferred != 1 {
		t.Errorf("after the fault: %d deferred, want 1", st.Deferred)
	}

	r.f.ClearStickyError()
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	ok(t, "Free", r.pool.Free(r.alloc(n, 9))) // the buffer came back
	release()
	ok(t, "MemFree", r.dev.MemFree(fd))
	ok(t, "heap Free", r.heap.Free(pcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeQuotaSaysCaptureHoldsDeferred: the quota's room is two buffers freed with FreeAsync
// behind copies still queued, one on a stream destroyed since without ForgetStream, while the
// user captures a graph on r.s: the reclaim cannot answer the destroyed stream with a
// synchronize of the context (it would end the capture). The Alloc the quota refuses must say
// so (an error matching ErrQuota and cuda.ErrCapturing, not ErrInvalidStream), and leave the
// capture valid.
func TestFakeQuotaSaysCaptureHoldsDeferred(t *testing.T) {
	const n = 4096
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1, Quota: 2 * n})
	if r == nil {
		return
	}
	d := r.freeBehindCopy()
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	b := r.alloc(n, 0xA)
	ok(t, "HtoDAsync", r.dev.MemcpyHtoDAsync(d, mem.Addr(b), n, s))
	ok(t, "FreeAsync", r.pool.FreeAsync(b, pcuda.Stream(s)))
	ok(t, "StreamDestroy, without ForgetStream", r.dev.StreamDestroy(s)) // its copy still queued
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(r.s, cuda.CaptureGlobal))
	_, aerr := r.pool.Alloc(n)
	g, cerr := r.dev.StreamEndCapture(r.s)
	if cerr != nil {
		t.Fatalf("Alloc invalidated the user's capture: %v (Alloc: %v)", cerr, aerr)
	}
	ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	if !errors.Is(aerr, pinned.ErrQuota) || !errors.Is(aerr, pcuda.ErrCapturing) ||
		errors.Is(aerr, pinned.ErrInvalidStream) {
		t.Errorf("Alloc the quota refuses while a capture holds deferred buffers: %v; "+
			"want ErrQuota and cuda.ErrCapturing, not ErrInvalidStream", aerr)
	}
	r.f.Hold(false)
	ok(t, "Trim once the capture has ended", r.pool.Trim())
	ok(t, "Free", r.pool.Free(r.alloc(n, 9))) // the buffers came back
	ok(t, "heap Free", r.heap.Free(pcuda.DevicePtr(d)))
	r.finish()
}
