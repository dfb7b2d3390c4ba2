package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Stream capture (fakedriver.c.in, "Stream capture"): one test per rule, each failing on a
// fake without it. They run on a GPU too (scripts/gpucheck), where they check the fake's rules
// against the driver's.

// CUresults of stream capture (cuda.h).
const (
	codeCaptureUnsupported = 900
	codeCaptureInvalidated = 901
	codeCaptureImplicit    = 906
	codeCapturedEvent      = 907
	codeCaptureWrongThread = 908
)

// capture begins a capture on s in mode; the test's goroutine stays on its OS thread, as a
// capture outside CaptureRelaxed must end on the thread that began it.
func capture(t *testing.T, d *cuda.Device, s cuda.Stream, mode cuda.CaptureMode) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	must(t, "StreamBeginCapture", d.StreamBeginCapture(s, mode))
}

// endValid ends the capture on s, which must give a graph.
func endValid(t *testing.T, d *cuda.Device, s cuda.Stream) {
	t.Helper()
	g, err := d.StreamEndCapture(s)
	if err != nil || g == 0 {
		t.Fatalf("StreamEndCapture = %#x, %v; want a graph", g, err)
	}
	must(t, "GraphDestroy", d.GraphDestroy(g))
}

// endInvalidated ends the capture on s, which must have been invalidated: no graph.
func endInvalidated(t *testing.T, d *cuda.Device, s cuda.Stream) {
	t.Helper()
	g, err := d.StreamEndCapture(s)
	wantCode(t, "StreamEndCapture", err, codeCaptureInvalidated)
	if g != 0 {
		t.Errorf("StreamEndCapture of an invalidated capture gave graph %#x", g)
		_ = d.GraphDestroy(g)
	}
}

// TestCaptureRecordsNotRuns: work queued on a capturing stream is captured, not run: a memset
// captured leaves the memory as it was, even after a synchronize of the context.
func TestCaptureRecordsNotRuns(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 4096)
	must(t, "MemsetD8", d.MemsetD8(x.dev, 1, x.n))
	must(t, "Synchronize", d.Synchronize())
	capture(t, d, x.s, cuda.CaptureGlobal)
	must(t, "MemsetD8Async captured", d.MemsetD8Async(x.dev, 2, x.n, x.s))
	endValid(t, d, x.s)
	must(t, "Synchronize", d.Synchronize())
	if !x.devHolds(t, x.dev, 1) {
		t.Error("a memset captured into a graph ran")
	}
	// The stream captures no more: its work runs again.
	must(t, "MemsetD8Async", d.MemsetD8Async(x.dev, 3, x.n, x.s))
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	if !x.devHolds(t, x.dev, 3) {
		t.Error("work queued after the capture ended did not run")
	}
}

// TestCaptureStreamQueryInvalidates: cuStreamQuery and cuStreamSynchronize of a capturing
// stream are refused (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidate the capture.
func TestCaptureStreamQueryInvalidates(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 4096)
	for _, c := range []struct {
		name string
		call func(cuda.Stream) error
	}{{"StreamQuery", d.StreamQuery}, {"StreamSynchronize", d.StreamSynchronize}} {
		capture(t, d, x.s, cuda.CaptureRelaxed) // in every mode
		wantCode(t, c.name+" of a capturing stream", c.call(x.s), codeCaptureUnsupported)
		if st, err := d.StreamIsCapturing(x.s); err != nil || st != cuda.CaptureInvalidated {
			t.Errorf("after %s: StreamIsCapturing = %d, %v; want invalidated", c.name, st, err)
		}
		endInvalidated(t, d, x.s)
	}
}

// TestCaptureContextSynchronizeInvalidates: cuCtxSynchronize while a stream of the context
// captures is refused and invalidates the capture.
func TestCaptureContextSynchronizeInvalidates(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 4096)
	capture(t, d, x.s, cuda.CaptureThreadLocal)
	wantCode(t, "Synchronize while a stream captures", d.Synchronize(), codeCaptureUnsupported)
	endInvalidated(t, d, x.s)
}

// TestCaptureEventQueryRefused: cuEventQuery and cuEventSynchronize of an event recorded in a
// capturing stream are refused (CUDA_ERROR_CAPTURED_EVENT) and invalidate the capture; an
// event recorded before the capture is queried as usual.
func TestCaptureEventQueryRefused(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 4096)
	before, in := x.event(t), x.event(t)
	must(t, "EventRecord before", d.EventRecord(before, x.s))
	for _, c := range []struct {
		name string
		call func(cuda.Event) error
	}{{"EventQuery", d.EventQuery}, {"EventSynchronize", d.EventSynchronize}} {
		capture(t, d, x.s, cuda.CaptureRelaxed)
		must(t, "EventRecord in the capture", d.EventRecord(in, x.s))
		must(t, c.name+" of an event recorded before", c.call(before))
		wantCode(t, c.name+" of a captured event", c.call(in), codeCapturedEvent)
		endInvalidated(t, d, x.s)
	}
}

// TestCaptureLegacyImplicit: a use of the legacy stream while a blocking stream captures is
// refused (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) and invalidates that capture; while only a
// non-blocking stream captures, the legacy stream is free.
func TestCaptureLegacyImplicit(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 4096)
	ev := x.event(t)
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"StreamQuery(legacy)", func() error { return d.StreamQuery(0) }},
		{"EventRecord(legacy)", func() error { return d.EventRecord(ev, 0) }},
		{"MemsetD8Async(legacy)", func() error { return d.MemsetD8Async(x.dev, 1, x.n, 0) }},
	} {
		capture(t, d, x.s, cuda.CaptureGlobal)
		must(t, c.name+" while a non-blocking stream captures", c.call())
		endValid(t, d, x.s)

		capture(t, d, x.blk, cuda.CaptureGlobal)
		wantCode(t, c.name+" while a blocking stream captures", c.call(), codeCaptureImplicit)
		endInvalidated(t, d, x.blk)
	}
	must(t, "Synchronize", d.Synchronize())
}

// TestCaptureIsCapturingInvalidatesNothing: cuStreamIsCapturing is answered during a capture
// and leaves it valid; of the legacy stream while a blocking stream captures it is refused
// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), still leaving the capture valid.
func TestCaptureIsCapturingInvalidatesNothing(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 4096)
	if st, err := d.StreamIsCapturing(x.blk); err != nil || st != cuda.CaptureNone {
		t.Errorf("StreamIsCapturing before = %d, %v; want none", st, err)
	}
	capture(t, d, x.blk, cuda.CaptureGlobal)
	if st, err := d.StreamIsCapturing(x.blk); err != nil || st != cuda.CaptureActive {
		t.Errorf("StreamIsCapturing = %d, %v; want active", st, err)
	}
	_, err := d.StreamIsCapturing(0)
	wantCode(t, "StreamIsCapturing(legacy) while a blocking stream captures", err, codeCaptureImplicit)
	endValid(t, d, x.blk)
	if st, err := d.StreamIsCapturing(0); err != nil || st != cuda.CaptureNone {
		t.Errorf("StreamIsCapturing(legacy) after = %d, %v; want none", st, err)
	}
}

// TestCaptureBeginEnd: a capture begins on a stream not capturing, other than the legacy
// stream, and ends on the stream that began it, from its thread outside CaptureRelaxed.
func TestCaptureBeginEnd(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 4096)
	if err := d.StreamBeginCapture(0, cuda.CaptureGlobal); err == nil {
		t.Error("a capture began on the legacy stream")
		_, _ = d.StreamEndCapture(0)
	}
	if _, err := d.StreamEndCapture(x.s); err == nil {
		t.Error("StreamEndCapture of a stream not capturing succeeded")
	}
	capture(t, d, x.s, cuda.CaptureGlobal)
	if err := d.StreamBeginCapture(x.s, cuda.CaptureGlobal); err == nil {
		t.Error("a second capture began on a capturing stream")
	}
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // another thread than the test's, and unlocked: it exits
		_, err := d.StreamEndCapture(x.s)
		done <- err
	}()
	wantCode(t, "StreamEndCapture from another thread", <-done, codeCaptureWrongThread)
	endValid(t, d, x.s)
}
