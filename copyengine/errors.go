package copyengine

import (
	"github.com/pinmalloc/pinmalloc"
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
	// ErrInvalidStream means a stream Copy cannot order a batch on: the per-thread default
	// stream (CU_STREAM_PER_THREAD), which names whichever OS thread's default stream a call
	// runs on.
	ErrInvalidStream = errkind.New(pinmalloc.ErrInvalidStream, "copyengine: invalid stream")
	// ErrClosed means the Batcher was used after Close.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "copyengine: batcher closed")
)
