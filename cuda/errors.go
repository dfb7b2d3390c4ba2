package cuda

import (
	"errors"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Sentinel errors. They are the same values the module's other packages return and wrap, so
// errors.Is(err, cuda.ErrOutOfMemory) holds for a driver error from device.Heap.Alloc as for
// one from this package. A failed driver call matches the sentinel of its class.
var (
	// ErrNoDriver reports that the CUDA driver library could not be loaded (libcuda.so.1 is
	// absent, it is a stub, or the program was built without cgo). The error names why.
	ErrNoDriver = icuda.ErrNoDriver
	// ErrNoDevice reports that the driver found no CUDA device, or none of that ordinal.
	ErrNoDevice = icuda.ErrNoDevice
	// ErrSymbol reports that the driver lacks an entry point (it is too old); the error names it.
	ErrSymbol = icuda.ErrSymbol
	// ErrOutOfMemory matches CUDA_ERROR_OUT_OF_MEMORY.
	ErrOutOfMemory = icuda.ErrOutOfMemory
	// ErrInvalidValue matches CUDA_ERROR_INVALID_VALUE, and arguments this package refuses.
	ErrInvalidValue = icuda.ErrInvalidValue
	// ErrNotSupported matches CUDA_ERROR_NOT_SUPPORTED.
	ErrNotSupported = icuda.ErrNotSupported
	// ErrInvalidHandle matches CUDA_ERROR_INVALID_HANDLE: a stream or event the driver does not
	// know (destroyed, or of another context).
	ErrInvalidHandle = icuda.ErrInvalidHandle
	// ErrNotReady matches CUDA_ERROR_NOT_READY: the work queried has not completed yet.
	ErrNotReady = icuda.ErrNotReady
	// ErrAlreadyRegistered matches CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
	ErrAlreadyRegistered = icuda.ErrAlreadyRegistered
	// ErrClosed reports a call on a Device after its Close.
	ErrClosed = icuda.ErrClosed
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
