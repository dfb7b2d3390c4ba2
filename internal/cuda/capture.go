package cuda

import (
	"fmt"
	"runtime"

	"github.com/pinmalloc/pinmalloc"
)

// Stream capture: work queued on a capturing stream is recorded into a graph instead of run
// (cuStreamBeginCapture_v2, cuStreamEndCapture). While a stream captures, the driver refuses a
// query or synchronize of it (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), of an event recorded in
// it (CUDA_ERROR_CAPTURED_EVENT), of the context, and any use of the legacy default stream
// while the capturing stream is blocking (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); each of these
// also invalidates the capture, whose end then gives no graph. StreamIsCapturing is the one
// question that is always allowed and invalidates nothing.

// Graph is a CUgraph, from StreamEndCapture; GraphDestroy destroys it.
type Graph uintptr

// CaptureMode is a CUstreamCaptureMode: which other calls a capture forbids.
type CaptureMode int

// Capture modes.
const (
	// CaptureGlobal forbids potentially unsafe calls on every thread while it lasts.
	CaptureGlobal CaptureMode = 0
	// CaptureThreadLocal forbids them on the capturing thread only.
	CaptureThreadLocal CaptureMode = 1
	// CaptureRelaxed forbids only the calls that conflict with any capture.
	CaptureRelaxed CaptureMode = 2
)

// CaptureStatus is a stream's CUstreamCaptureStatus.
type CaptureStatus int

// Capture statuses.
const (
	// CaptureNone: the stream is not capturing.
	CaptureNone CaptureStatus = 0
	// CaptureActive: the stream is capturing.
	CaptureActive CaptureStatus = 1
	// CaptureInvalidated: the stream's capture was invalidated and must still be ended.
	CaptureInvalidated CaptureStatus = 2
)

// StreamBeginCapture begins capturing the work queued on s into a graph. Outside
// CaptureRelaxed the capture must be ended on the same OS thread: lock it
// (runtime.LockOSThread) around the two calls. It waits for the library's checks in progress
// (HoldCaptureBegins) that a stream, s maybe, is not capturing, and for the acts they allow.
func (d *Device) StreamBeginCapture(s Stream, mode CaptureMode) error {
	if mode < CaptureGlobal || mode > CaptureRelaxed {
		return fmt.Errorf("%w: capture mode %d", pinmalloc.ErrInvalidValue, mode)
	}
	return gatedBegin(func() error { return d.StreamBeginCaptureUngated(s, mode) })
}

// StreamBeginCaptureUngated is StreamBeginCapture without waiting for the capture gate
// (capturegate.go), as a capture begun by another binding of the driver does: tests use it to
// put such a capture between a check of the library's and the act the check allows.
func (d *Device) StreamBeginCaptureUngated(s Stream, mode CaptureMode) error {
	if mode < CaptureGlobal || mode > CaptureRelaxed {
		return fmt.Errorf("%w: capture mode %d", pinmalloc.ErrInvalidValue, mode)
	}
	return d.Do(func() error { return d.drv.streamBeginCapture(s, mode) })
}

// StreamEndCapture ends the capture on s and returns its graph, or no graph and an error
// (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) when the capture was invalidated.
func (d *Device) StreamEndCapture(s Stream) (g Graph, err error) {
	err = d.Do(func() (e error) { g, e = d.drv.streamEndCapture(s); return })
	return g, err
}

// ThreadExchangeCaptureMode sets the calling OS thread's capture interaction mode
// (cuThreadExchangeStreamCaptureMode) and returns the mode it had: which potentially unsafe
// calls (cuMemAlloc, cuMemFree...) the thread may make while it, or another thread, captures.
// Lock the thread (runtime.LockOSThread) around it, the calls it is for and the exchange that
// restores the mode. A driver without the call answers an error matching ErrSymbol.
func (d *Device) ThreadExchangeCaptureMode(mode CaptureMode) (CaptureMode, error) {
	if mode < CaptureGlobal || mode > CaptureRelaxed {
		return 0, fmt.Errorf("%w: capture mode %d", pinmalloc.ErrInvalidValue, mode)
	}
	return d.drv.threadExchangeCaptureMode(mode)
}

// RelaxCapture locks the calling goroutine to its OS thread and sets the thread's capture
// interaction mode to CaptureRelaxed until restore is called (defer d.RelaxCapture()()): the
// memory calls a library makes in the background, or on a caller's goroutine for memory of
// its own, are then neither refused nor invalidate the capture a user's thread is making in
// the default GLOBAL mode (NCCL does the same around its cudaMalloc and cudaFree). A driver
// without the call leaves the mode as it is.
func (d *Device) RelaxCapture() (restore func()) {
	runtime.LockOSThread()
	prev, err := d.drv.threadExchangeCaptureMode(CaptureRelaxed)
	if err != nil {
		return runtime.UnlockOSThread
	}
	return func() {
		_, _ = d.drv.threadExchangeCaptureMode(prev) // refused only for a mode out of range
		runtime.UnlockOSThread()
	}
}

// StreamIsCapturing returns the capture status of s. It is the one call allowed on a
// capturing stream that invalidates nothing; on the legacy default stream while a blocking
// stream captures it fails (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT),
// still invalidating nothing. A driver without cuStreamIsCapturing answers an error matching
// ErrSymbol.
func (d *Device) StreamIsCapturing(s Stream) (CaptureStatus, error) {
	if !d.enter() {
		return CaptureNone, d.closedError()
	}
	seq := taints.seq.Load()
	st, err := d.drv.streamIsCapturingIn(d.ctx, s) // push, call and pop in one cgo call
	d.exit()
	d.letGoAfterAsk(s, seq, err == nil && st == CaptureNone)
	return st, err
}

// EventRecordOutsideCapture records ev in s, as EventRecord, unless a capture holds s: then
// it records nothing and returns the status of s (CaptureActive or CaptureInvalidated), or,
// for the legacy stream while a blocking stream captures, the driver's refusal (an error
// matching ErrCapturing). It asks and records in one cgo call: the record of an event of the
// library's own in a user's stream, which the user's capture must not take, costs two driver
// calls more than EventRecord (the ask, and a second after the record), not a second cgo call.
// A driver without cuStreamIsCapturing records.
//
// Hold HoldCaptureBegins around it, with the checks that led to it: a capture begun through
// StreamBeginCapture then never falls between its ask and its record. One begun by other code
// on another thread may: when s captures at the second ask, the record may be the capture's,
// so it returns the status of s as if nothing was recorded and marks ev tainted
// (EventTainted): the caller must not record ev again nor take it for a point, and
// EventPool.Put lets it go, to be destroyed by a later ask of d that finds s not capturing
// (capturetaint.go). A capture that other code begins after the first ask and ends before the
// second, the record inside it, no ask sees: the call then answers CaptureNone, ev untainted,
// for a point that is none (the package doc, "Captures begun by another binding").
func (d *Device) EventRecordOutsideCapture(ev Event, s Stream) (CaptureStatus, error) {
	if !d.enter() {
		return CaptureNone, d.closedError()
	}
	seq := taints.seq.Load()
	st, tainted, free, err := d.drv.eventRecordOutsideCaptureIn(d.ctx, ev, s)
	if tainted {
		taint(ev, d, s) // before exit: Close, which waits for it, finds the taint (closeTaints)
	}
	d.exit()
	d.letGoAfterAsk(s, seq, free)
	return st, err
}

// HookCaptureCheck makes the check that finds a stream not capturing (StreamIsCapturing, or
// an ask of EventRecordOutsideCapture) after skip others call the driver library's function
// sym, once, with op, 1 and 0, before the call the answer allows; sym "" disarms it. It is for
// tests: a fake driver's control that makes its next call stop (internal/fakecuda's
// PauseNextCall) stops the library's query or record after its check, for the test to begin
// a capture then. A library without sym answers an error matching ErrSymbol.
func (d *Device) HookCaptureCheck(sym string, op, skip int) error {
	return d.drv.hookCaptureCheck(sym, op, skip)
}

// GraphDestroy destroys a graph from StreamEndCapture.
func (d *Device) GraphDestroy(g Graph) error {
	return d.Do(func() error { return d.drv.graphDestroy(g) })
}
