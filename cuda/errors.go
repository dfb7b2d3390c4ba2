package cuda

import (
	"errors"

	"github.com/pinmalloc/pinmalloc"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Sentinel errors: the module's error vocabulary (package pinmalloc), re-exported. They are
// the same values the module's other packages return and wrap, so errors.Is(err,
// cuda.ErrNoDriver) holds for an error from device.New as for one from this package. A failed
// driver call matches the sentinel of its class.
var (
	// ErrNoDriver reports that the CUDA driver library could not be loaded (libcuda.so.1 is
	// absent, it is a stub, it has no cuInit, or the program was built without cgo). The error
	// names why.
	ErrNoDriver = pinmalloc.ErrNoDriver
	// ErrNoDevice reports that the driver found no CUDA device, or none of that ordinal.
	ErrNoDevice = pinmalloc.ErrNoDevice
	// ErrSymbol reports that the driver lacks an entry point (it is too old); the error names it.
	ErrSymbol = pinmalloc.ErrSymbol
	// ErrOutOfMemory matches CUDA_ERROR_OUT_OF_MEMORY. It is pinmalloc.ErrOutOfMemory, so a
	// full pool or device heap matches it as well.
	ErrOutOfMemory = pinmalloc.ErrOutOfMemory
	// ErrInvalidValue matches CUDA_ERROR_INVALID_VALUE, and arguments this package refuses.
	ErrInvalidValue = pinmalloc.ErrInvalidValue
	// ErrNotSupported matches CUDA_ERROR_NOT_SUPPORTED.
	ErrNotSupported = pinmalloc.ErrNotSupported
	// ErrInvalidHandle matches CUDA_ERROR_INVALID_HANDLE: a stream or event the driver does not
	// know (destroyed, or of another context).
	ErrInvalidHandle = pinmalloc.ErrInvalidHandle
	// ErrNotReady matches CUDA_ERROR_NOT_READY: the work queried has not completed yet.
	ErrNotReady = pinmalloc.ErrNotReady
	// ErrAlreadyRegistered matches CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
	ErrAlreadyRegistered = pinmalloc.ErrAlreadyRegistered
	// ErrCapturing matches the driver's refusals of a call because a stream captures a CUDA
	// graph (CUDA_ERROR_STREAM_CAPTURE_* and CUDA_ERROR_CAPTURED_EVENT, 900 - 908),
	// and the module's refusals of the same kind: a FreeAsync or RecordStream on a capturing
	// stream, whose graph may use the memory for as long as the graph lives.
	ErrCapturing = pinmalloc.ErrCapturing
	// ErrDeviceFault matches the driver's sticky errors: the device faulted running work of
	// the context (CUDA_ERROR_ILLEGAL_ADDRESS, _MISALIGNED_ADDRESS, _ASSERT, _LAUNCH_FAILED and
	// the others documented as leaving the process in an inconsistent state). Every later call
	// returns it; the process must exit to use CUDA again.
	ErrDeviceFault = pinmalloc.ErrDeviceFault
	// ErrClosed reports a call on a Device after its Close. It is pinmalloc.ErrClosed, the kind
	// every package's use-after-Close error matches.
	ErrClosed = pinmalloc.ErrClosed
)

// ResultCode returns the CUresult number of the driver error in err's chain (2 for
// CUDA_ERROR_OUT_OF_MEMORY, 700 for CUDA_ERROR_ILLEGAL_ADDRESS, ...), and false when err holds
// none: nil, or an error that did not come from a driver call.
func ResultCode(err error) (code int, ok bool) {
	var r icuda.Result
	if errors.As(err, &r) {
		return int(r), true
	}
	return 0, false
}
