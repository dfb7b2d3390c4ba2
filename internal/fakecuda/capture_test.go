package fakecuda

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Stream capture (fakedriver.c.in, "Stream capture"): one rule per function of captureRules,
// each failing on a fake without it, run on the fake by a test of its own (TestCapture...) and
// on a GPU by TestCUDACaptureRules (scripts/gpucheck runs it), where it checks the fake's rule
// against the driver's: each answer of the driver is logged, and one that differs fails the
// rule's subtest saying what the driver answered.

// CUresults of stream capture (cuda.h).
const (
	codeCaptureUnsupported = 900
	codeCaptureInvalidated = 901
	codeCaptureMerge       = 902
	codeCaptureIsolation   = 905
	codeCaptureImplicit    = 906
	codeCapturedEvent      = 907
	codeCaptureWrongThread = 908
	codeIllegalState       = 401
)

// capture begins a capture on s in mode; the test's goroutine stays on its OS thread, as a
// capture outside CaptureRelaxed must end on the thread that began it.
func capture(t *testing.T, d *cuda.Device, s cuda.Stream, mode cuda.CaptureMode) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	must(t, "StreamBeginCapture", d.StreamBeginCapture(s, mode))
	t.Cleanup(func() { // a rule that failed with the capture on: end it, so the fixture's cleanup can run
		if st, err := d.StreamIsCapturing(s); err == nil && st != cuda.CaptureNone {
			if g, err := d.StreamEndCapture(s); err == nil && g != 0 {
				_ = d.GraphDestroy(g)
			}
		}
	})
}

// answer logs what the driver answered to a call of a rule, and fails the rule's test unless
// it is CUresult code (0: success).
func answer(t *testing.T, what string, err error, code int) {
	t.Helper()
	var r cuda.Result
	got := 0
	if err != nil {
		got = -1
		if errors.As(err, &r) {
			got = int(r)
		}
	}
	t.Logf("driver: %s = %d (%v)", what, got, err)
	if got != code {
		t.Errorf("%s = %v, want CUDA result %d", what, err, code)
	}
}

// TestCaptureThreadModes: a thread's capture interaction mode (cuThreadExchangeStreamCaptureMode,
// which answers the mode the thread had, GLOBAL by default) decides which captures prohibit its
// potentially unsafe calls: beside another thread's GLOBAL capture, a thread in RELAXED or
// THREAD_LOCAL mode may allocate and free device and pinned host memory, and the capture stays
// valid; the capturing thread itself may in RELAXED mode. A mode out of range is refused.
func TestCaptureThreadModes(t *testing.T) { onFake(t, captureThreadModes) }

func captureThreadModes(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	// calls allocates and frees device and pinned host memory on a thread of its own, in mode.
	calls := func(mode cuda.CaptureMode) error {
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // another thread than the test's, and unlocked: it exits
			prev, err := d.ThreadExchangeCaptureMode(mode)
			if err != nil {
				done <- err
				return
			}
			if prev != cuda.CaptureGlobal {
				done <- fmt.Errorf("a new thread's mode is %d, want GLOBAL", prev)
				return
			}
			done <- unsafeCalls(d)
		}()
		return <-done
	}
	for _, mode := range []cuda.CaptureMode{cuda.CaptureRelaxed, cuda.CaptureThreadLocal} {
		capture(t, d, x.s, cuda.CaptureGlobal)
		answer(t, fmt.Sprintf("MemAlloc, MemFree, MemHostAlloc, MemFreeHost in mode %d beside a GLOBAL capture", mode), calls(mode), 0)
		endValid(t, d, x.s)
	}
	capture(t, d, x.s, cuda.CaptureGlobal)
	prev, err := d.ThreadExchangeCaptureMode(cuda.CaptureRelaxed)
	must(t, "ThreadExchangeCaptureMode", err)
	answer(t, "MemAlloc, MemFree, MemHostAlloc, MemFreeHost on the capturing thread in RELAXED mode", unsafeCalls(d), 0)
	if back, err := d.ThreadExchangeCaptureMode(prev); err != nil || back != cuda.CaptureRelaxed {
		t.Errorf("ThreadExchangeCaptureMode back = %d, %v; want RELAXED (2), the mode set", back, err)
	}
	endValid(t, d, x.s)
	if _, err := d.ThreadExchangeCaptureMode(3); err == nil {
		t.Error("ThreadExchangeCaptureMode(3) accepted a mode out of range")
	}
}

// TestCaptureQueriesUnsafe: a query or synchronize of work outside any capture (cuEventQuery,
// cuEventSynchronize, cuStreamQuery, cuStreamSynchronize) is a potentially unsafe call: made on
// another thread in the default GLOBAL mode (Device.StrictCapture) beside a GLOBAL capture,
// each is refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the capture is invalidated on the
// fake; a GPU's end of it is logged); in the RELAXED mode the Device uses by default, each is
// answered and the capture stays valid.
func TestCaptureQueriesUnsafe(t *testing.T) { onFake(t, captureQueriesUnsafe) }

func captureQueriesUnsafe(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(ev)) }()
	must(t, "EventRecord", d.EventRecord(ev, x.s2))
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s2))
	calls := []struct {
		name string
		call func() error
	}{
		{"EventQuery", func() error { return d.EventQuery(ev) }},
		{"EventSynchronize", func() error { return d.EventSynchronize(ev) }},
		{"StreamQuery", func() error { return d.StreamQuery(x.s2) }},
		{"StreamSynchronize", func() error { return d.StreamSynchronize(x.s2) }},
	}
	onThread := func(f func() error) error { // another thread than the test's
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // unlocked: the thread exits
			done <- f()
		}()
		return <-done
	}
	d.StrictCapture(true)
	defer d.StrictCapture(false)
	for _, c := range calls {
		capture(t, d, x.s, cuda.CaptureGlobal)
		answer(t, c.name+" on another thread in GLOBAL mode beside a GLOBAL capture", onThread(c.call), codeCaptureUnsupported)
		g, err := d.StreamEndCapture(x.s)
		t.Logf("driver: StreamEndCapture after %s = %#x, %v", c.name, g, err)
		if g != 0 {
			_ = d.GraphDestroy(g)
		}
	}
	d.StrictCapture(false)
	for _, c := range calls {
		capture(t, d, x.s, cuda.CaptureGlobal)
		answer(t, c.name+" on another thread in RELAXED mode beside a GLOBAL capture", onThread(c.call), 0)
		endValid(t, d, x.s)
	}
}

// unsafeCalls allocates and frees device and pinned host memory: potentially unsafe calls.
func unsafeCalls(d *cuda.Device) error {
	p, err := d.MemAlloc(4096)
	if err != nil {
		return err
	}
	if err := d.MemFree(p); err != nil {
		return err
	}
	h, err := d.MemHostAlloc(4096, 0)
	if err != nil {
		return err
	}
	return d.MemFreeHost(h)
}

// captureRules are the rules of stream capture the fake models, each a function of a device:
// the fake's (TestCapture...) or a GPU's (TestCUDACaptureRules).
var captureRules = []struct {
	name string
	rule func(*testing.T, *cuda.Device)
}{
	{"RecordsNotRuns", captureRecordsNotRuns},
	{"StreamQueryInvalidates", captureStreamQueryInvalidates},
	{"ContextSynchronizeInvalidates", captureContextSynchronizeInvalidates},
	{"EventQueryRefused", captureEventQueryRefused},
	{"EventAfterCapture", captureEventAfterCapture},
	{"EventDestroyAfterCapture", captureEventDestroyAfterCapture},
	{"LegacyImplicit", captureLegacyImplicit},
	{"IsCapturingInvalidatesNothing", captureIsCapturingInvalidatesNothing},
	{"BeginEnd", captureBeginEnd},
	{"BatchRefused", captureBatchRefused},
	{"UnsafeAllocFree", captureUnsafeAllocFree},
	{"UnsafeRegister", captureUnsafeRegister},
	{"PoolAttributes", capturePoolAttributes},
	{"ThreadModes", captureThreadModes},
	{"QueriesUnsafe", captureQueriesUnsafe},
	{"SyncCopiesBeside", captureSyncCopiesBeside},
	{"UnsafeBesideGlobal", captureUnsafeBesideGlobal},
	{"HostAllocBeside", captureHostAllocBeside},
	{"VMMAndUnregister", captureVMMAndUnregister},
	{"WaitAcrossCaptures", captureWaitAcrossCaptures},
}

// onFake runs rule on the fake driver.
func onFake(t *testing.T, rule func(*testing.T, *cuda.Device)) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	rule(t, d)
}

// TestCUDACaptureRules checks each rule of captureRules on device 0 of the real driver, one
// subtest per rule; it skips only where there is no driver or no device (GPU).
func TestCUDACaptureRules(t *testing.T) {
	d := GPU(t, 0)
	for _, c := range captureRules {
		t.Run(c.name, func(t *testing.T) { c.rule(t, d) })
	}
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
	answer(t, "StreamEndCapture of an invalidated capture", err, codeCaptureInvalidated)
	if g != 0 {
		t.Errorf("StreamEndCapture of an invalidated capture gave graph %#x", g)
		_ = d.GraphDestroy(g)
	}
}

// TestCaptureRecordsNotRuns: work queued on a capturing stream is captured, not run: a memset
// captured leaves the memory as it was, even after a synchronize of the context.
func TestCaptureRecordsNotRuns(t *testing.T) { onFake(t, captureRecordsNotRuns) }

func captureRecordsNotRuns(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
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
func TestCaptureStreamQueryInvalidates(t *testing.T) { onFake(t, captureStreamQueryInvalidates) }

func captureStreamQueryInvalidates(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	for _, c := range []struct {
		name string
		call func(cuda.Stream) error
	}{{"StreamQuery", d.StreamQuery}, {"StreamSynchronize", d.StreamSynchronize}} {
		capture(t, d, x.s, cuda.CaptureRelaxed) // in every mode
		answer(t, c.name+" of a capturing stream", c.call(x.s), codeCaptureUnsupported)
		if st, err := d.StreamIsCapturing(x.s); err != nil || st != cuda.CaptureInvalidated {
			t.Errorf("after %s: StreamIsCapturing = %d, %v; want invalidated", c.name, st, err)
		}
		endInvalidated(t, d, x.s)
	}
}

// TestCaptureContextSynchronizeInvalidates: cuCtxSynchronize while a stream of the context
// captures is refused and invalidates the capture.
func TestCaptureContextSynchronizeInvalidates(t *testing.T) {
	onFake(t, captureContextSynchronizeInvalidates)
}

func captureContextSynchronizeInvalidates(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	capture(t, d, x.s, cuda.CaptureThreadLocal)
	answer(t, "Synchronize while a stream captures", d.Synchronize(), codeCaptureUnsupported)
	endInvalidated(t, d, x.s)
}

// TestCaptureEventQueryRefused: cuEventQuery and cuEventSynchronize of an event recorded in a
// capturing stream are refused (CUDA_ERROR_CAPTURED_EVENT) and invalidate the capture; an
// event recorded before the capture is queried as usual.
func TestCaptureEventQueryRefused(t *testing.T) { onFake(t, captureEventQueryRefused) }

func captureEventQueryRefused(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	before, in := x.event(t), x.event(t)
	must(t, "EventRecord before", d.EventRecord(before, x.s))
	for _, c := range []struct {
		name string
		call func(cuda.Event) error
	}{{"EventQuery", d.EventQuery}, {"EventSynchronize", d.EventSynchronize}} {
		capture(t, d, x.s, cuda.CaptureRelaxed)
		must(t, "EventRecord in the capture", d.EventRecord(in, x.s))
		must(t, c.name+" of an event recorded before", c.call(before))
		answer(t, c.name+" of a captured event", c.call(in), codeCapturedEvent)
		endInvalidated(t, d, x.s)
	}
}

// TestCaptureLegacyImplicit: a use of the legacy stream while a blocking stream captures is
// refused (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) and invalidates that capture; while only a
// non-blocking stream captures, the legacy stream is free.
func TestCaptureLegacyImplicit(t *testing.T) { onFake(t, captureLegacyImplicit) }

func captureLegacyImplicit(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	ev := x.event(t)
	m, err := d.ModuleLoadData(gatherPTX) // its body returns at once: a launch of no job
	must(t, "ModuleLoadData", err)
	t.Cleanup(func() { must(t, "ModuleUnload", d.ModuleUnload(m)) })
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"StreamQuery(legacy)", func() error { return d.StreamQuery(0) }},
		{"EventRecord(legacy)", func() error { return d.EventRecord(ev, 0) }},
		{"MemsetD8Async(legacy)", func() error { return d.MemsetD8Async(x.dev, 1, x.n, 0) }},
		{"LaunchKernel(legacy)", func() error { return d.LaunchKernel(fn, one, one, 0, 0, 0, 0) }},
	} {
		capture(t, d, x.s, cuda.CaptureGlobal)
		must(t, c.name+" while a non-blocking stream captures", c.call())
		endValid(t, d, x.s)

		capture(t, d, x.blk, cuda.CaptureGlobal)
		answer(t, c.name+" while a blocking stream captures", c.call(), codeCaptureImplicit)
		endInvalidated(t, d, x.blk)
	}
	must(t, "Synchronize", d.Synchronize())
}

// TestCaptureIsCapturingInvalidatesNothing: cuStreamIsCapturing is answered during a capture
// and leaves it valid; of the legacy stream while a blocking stream captures it is refused
// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), still leaving the capture valid.
func TestCaptureIsCapturingInvalidatesNothing(t *testing.T) {
	onFake(t, captureIsCapturingInvalidatesNothing)
}

func captureIsCapturingInvalidatesNothing(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	if st, err := d.StreamIsCapturing(x.blk); err != nil || st != cuda.CaptureNone {
		t.Errorf("StreamIsCapturing before = %d, %v; want none", st, err)
	}
	capture(t, d, x.blk, cuda.CaptureGlobal)
	if st, err := d.StreamIsCapturing(x.blk); err != nil || st != cuda.CaptureActive {
		t.Errorf("StreamIsCapturing = %d, %v; want active", st, err)
	}
	_, err := d.StreamIsCapturing(0)
	answer(t, "StreamIsCapturing(legacy) while a blocking stream captures", err, codeCaptureImplicit)
	endValid(t, d, x.blk)
	if st, err := d.StreamIsCapturing(0); err != nil || st != cuda.CaptureNone {
		t.Errorf("StreamIsCapturing(legacy) after = %d, %v; want none", st, err)
	}
}

// TestCaptureBeginEnd: a capture begins on a stream not capturing, other than the legacy
// stream (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED there; CUDA_ERROR_ILLEGAL_STATE on a stream
// already capturing, whose capture stays valid), and ends on the stream that began it
// (CUDA_ERROR_ILLEGAL_STATE on a stream not capturing), from its thread outside CaptureRelaxed
// (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD).
func TestCaptureBeginEnd(t *testing.T) { onFake(t, captureBeginEnd) }

func captureBeginEnd(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	err := d.StreamBeginCapture(0, cuda.CaptureGlobal)
	answer(t, "StreamBeginCapture(legacy)", err, codeCaptureUnsupported)
	if err == nil {
		_, _ = d.StreamEndCapture(0)
	}
	_, err = d.StreamEndCapture(x.s)
	answer(t, "StreamEndCapture of a stream not capturing", err, codeIllegalState)
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "StreamBeginCapture of a capturing stream", d.StreamBeginCapture(x.s, cuda.CaptureGlobal), codeIllegalState)
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // another thread than the test's, and unlocked: it exits
		_, err := d.StreamEndCapture(x.s)
		done <- err
	}()
	answer(t, "StreamEndCapture from another thread", <-done, codeCaptureWrongThread)
	endValid(t, d, x.s)
}

// TestCaptureEventAfterCapture: an event last recorded in a capture that has ended counts as
// never recorded: queries and synchronizes of it succeed, a wait on it is accepted (and waits
// for nothing: no stream point stands behind it; what uvm's release event, recorded in a
// capture, became before its Release refused a capturing stream), and a record outside a
// capture makes it an event of its stream again. On the fake this states the model; on a GPU
// it asks the driver.
func TestCaptureEventAfterCapture(t *testing.T) { onFake(t, captureEventAfterCapture) }

func captureEventAfterCapture(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	ev := x.event(t)
	capture(t, d, x.s, cuda.CaptureThreadLocal)
	must(t, "EventRecord in the capture", d.EventRecord(ev, x.s))
	endValid(t, d, x.s)
	answer(t, "EventQuery of an event recorded in an ended capture", d.EventQuery(ev), 0)
	answer(t, "EventSynchronize of an event recorded in an ended capture", d.EventSynchronize(ev), 0)
	answer(t, "StreamWaitEvent on an event recorded in an ended capture", d.StreamWaitEvent(x.s2, ev), 0)
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s2))
	must(t, "EventRecord after the capture", d.EventRecord(ev, x.s))
	must(t, "EventSynchronize after the capture", d.EventSynchronize(ev))
}

// TestCaptureBatchRefused: cuMemcpyBatchAsync has no graph node, so a batch on a capturing
// stream is refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the refusal leaves the
// capture valid (its end still gives a graph) and moves nothing: cuda.core's copy_batch ("the
// driver provides no graph-node form of cuMemcpyBatchAsync, so this cannot be captured into a
// graph"); rapidsai/rmm#2518 and NVIDIA/cuopt#1753, measured on CUDA 13: cudaMemcpyAsync
// during a capture 0, cudaMemcpyBatchAsync 900, the capture not invalidated.
func TestCaptureBatchRefused(t *testing.T) { onFake(t, captureBatchRefused) }

func captureBatchRefused(t *testing.T, d *cuda.Device) {
	if err := d.MemcpyBatchSupported(); err != nil {
		t.Skipf("no cuMemcpyBatchAsync_v2: %v", err)
	}
	x := newAsyncFixture(t, nil, d, 4096)
	must(t, "MemsetD8", d.MemsetD8(x.dev, 1, x.n))
	must(t, "MemsetD8", d.MemsetD8(x.dev2, 2, x.n))
	must(t, "Synchronize", d.Synchronize())
	capture(t, d, x.s, cuda.CaptureGlobal)
	err := d.MemcpyBatchAsync([]uintptr{uintptr(x.dev)}, []uintptr{uintptr(x.dev2)}, []uintptr{x.n}, 0, x.s)
	answer(t, "MemcpyBatchAsync on a capturing stream", err, codeCaptureUnsupported)
	if st, err := d.StreamIsCapturing(x.s); err != nil || st != cuda.CaptureActive {
		t.Errorf("StreamIsCapturing after the refused batch = %d, %v; want active", st, err)
	}
	endValid(t, d, x.s)
	must(t, "Synchronize", d.Synchronize())
	if !x.devHolds(t, x.dev, 1) {
		t.Error("a batch refused during a capture moved bytes")
	}
}

// TestCaptureUnsafeAllocFree: cuMemAlloc is the driver's example of a "potentially unsafe" call
// (cuThreadExchangeStreamCaptureMode), and cuMemFree and cuMemFreeHost synchronize the context:
// while a capture begun GLOBAL is on (any thread), or one begun THREAD_LOCAL on the calling
// thread, each is refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (the calling thread is in
// the default GLOBAL mode); another thread may call them beside a THREAD_LOCAL capture, and
// the capturing thread beside a RELAXED one. The fake invalidates the capture that forbade the
// call (unmeasured; on a GPU the end's answer is logged, and a valid graph is accepted too).
func TestCaptureUnsafeAllocFree(t *testing.T) { onFake(t, captureUnsafeAllocFree) }

func captureUnsafeAllocFree(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	p, err := d.MemAlloc(4096)
	must(t, "MemAlloc", err)
	h, err := d.MemHostAlloc(4096, 0)
	must(t, "MemHostAlloc", err)
	endEither := func(what string) {
		g, err := d.StreamEndCapture(x.s)
		t.Logf("driver: StreamEndCapture after %s = %#x, %v", what, g, err)
		if g != 0 {
			_ = d.GraphDestroy(g)
		}
	}
	capture(t, d, x.s, cuda.CaptureGlobal)
	q, err := d.MemAlloc(4096)
	answer(t, "MemAlloc during a GLOBAL capture", err, codeCaptureUnsupported)
	if err == nil {
		defer func() { must(t, "MemFree", d.MemFree(q)) }()
	}
	endEither("MemAlloc")
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemFree during a GLOBAL capture", d.MemFree(p), codeCaptureUnsupported)
	endEither("MemFree")
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemFreeHost during a GLOBAL capture", d.MemFreeHost(h), codeCaptureUnsupported)
	endEither("MemFreeHost")
	// Beside a THREAD_LOCAL capture another thread may allocate; beside a RELAXED one, the
	// capturing thread too.
	capture(t, d, x.s, cuda.CaptureThreadLocal)
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // another thread than the test's, and unlocked: it exits
		r, err := d.MemAlloc(4096)
		if err == nil {
			err = d.MemFree(r)
		}
		done <- err
	}()
	answer(t, "MemAlloc+MemFree on another thread during a THREAD_LOCAL capture", <-done, 0)
	endValid(t, d, x.s)
	capture(t, d, x.s, cuda.CaptureRelaxed)
	r, err := d.MemAlloc(4096)
	answer(t, "MemAlloc during a RELAXED capture", err, 0)
	endValid(t, d, x.s)
	if err == nil {
		must(t, "MemFree", d.MemFree(r))
	}
	// p and h were kept by the refusals (if the driver freed them, the test has said so above).
	_ = d.MemFree(p)
	_ = d.MemFreeHost(h)
}

// TestCaptureWaitAcrossCaptures: a capturing stream may not wait on an event recorded outside
// its capture (the programming guide, "Prohibited and Unhandled Operations": "It is invalid to
// wait on a non-captured event from a stream which is being captured without specifying the
// cudaEventWaitExternal flag"; CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "a dependency ... which
// crosses the capture sequence boundary"), nor on one recorded in another capture ("It is
// invalid to merge two separate capture graphs"; CUDA_ERROR_STREAM_CAPTURE_MERGE). Either is
// refused and invalidates the captures it touches (the guide, "Invalidation": "any associated
// capture graphs are invalidated"; UNMEASURED: the codes, and that the event's capture is
// invalidated by a merge). A stream that does not capture waits on the event as before.
func TestCaptureWaitAcrossCaptures(t *testing.T) { onFake(t, captureWaitAcrossCaptures) }

func captureWaitAcrossCaptures(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	outside, in := x.event(t), x.event(t)
	must(t, "EventRecord outside any capture", d.EventRecord(outside, x.s2))

	capture(t, d, x.s, cuda.CaptureRelaxed)
	answer(t, "StreamWaitEvent of a capturing stream on an event recorded outside it",
		d.StreamWaitEvent(x.s, outside), codeCaptureIsolation)
	endInvalidated(t, d, x.s)
	must(t, "StreamWaitEvent of a stream that no longer captures", d.StreamWaitEvent(x.s, outside))

	capture(t, d, x.s, cuda.CaptureRelaxed)
	capture(t, d, x.s2, cuda.CaptureRelaxed)
	must(t, "EventRecord in the second capture", d.EventRecord(in, x.s2))
	answer(t, "StreamWaitEvent of a capturing stream on another capture's event",
		d.StreamWaitEvent(x.s, in), codeCaptureMerge)
	endInvalidated(t, d, x.s)
	endInvalidated(t, d, x.s2)
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
}
