package copyengine

import (
	"errors"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Sentinel errors of the Batcher. Each matches its kind of the module's shared sentinels too
// (ErrClosed matches pinmalloc.ErrClosed); the driver's errors pass through wrapped.
var (
	// ErrInvalidOptions means Options that cannot work, or a device not opened by package cuda.
	ErrInvalidOptions = errkind.New(pinmalloc.ErrInvalid, "copyengine: invalid options")
	// ErrInvalidJob means a job with a zero length, a zero address, or a range that wraps.
	ErrInvalidJob = errkind.New(pinmalloc.ErrInvalid, "copyengine: invalid copy job")
	// ErrOverlap means two jobs of one batch whose destinations overlap, or a destination that
	// overlaps a source.
	ErrOverlap = errkind.New(pinmalloc.ErrInvalid, "copyengine: overlapping copy jobs")
	// ErrMethodUnsupported means the driver cannot do the method asked for; the error wraps
	// the driver's reason.
	ErrMethodUnsupported = errkind.New(pinmalloc.ErrNotSupported, "copyengine: copy method not supported by the driver")
	// ErrNotCalibrated means Calibration has none to give: the method was forced, the driver
	// has one method only, or the calibration failed (its error is in the chain).
	ErrNotCalibrated = errkind.New(pinmalloc.ErrNotSupported, "copyengine: no calibration")
	// ErrInvalidStream means a stream Copy cannot order a batch on: the per-thread default
	// stream (CU_STREAM_PER_THREAD), which names whichever OS thread's default stream a call
	// runs on, a stream of another device or CUDA context than the Batcher's, or a handle the
	// driver does not know as a stream (a destroyed one).
	ErrInvalidStream = errkind.New(pinmalloc.ErrInvalidStream, "copyengine: invalid stream")
	// ErrClosed means the Batcher was used after Close.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "copyengine: batcher closed")
	// ErrDeviceFault means the device faulted running work of the Batcher's context (the
	// driver's sticky error, cuda.ErrDeviceFault, is in the chain): the driver refuses every
	// call from then on, and a Copy, a Close or a New says so with it.
	ErrDeviceFault = errkind.New(pinmalloc.ErrDeviceFault, "copyengine: the device faulted")
)

// faulted returns err, made to match ErrDeviceFault too when the driver's sticky error
// (cuda.ErrDeviceFault) is in its chain and ErrDeviceFault is not, as package device's errors
// do with its own. An error that names this package already keeps its text; another is said
// after ErrDeviceFault's. Nil stays nil at the cost of a comparison.
func faulted(err error) error {
	if err == nil || !errors.Is(err, cuda.ErrDeviceFault) || errors.Is(err, ErrDeviceFault) {
		return err
	}
	return errkind.Also(ErrDeviceFault, err, "copyengine: ")
}
