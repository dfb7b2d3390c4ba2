package cuda

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pinmalloc/pinmalloc"
)

// Result is a CUresult other than CUDA_SUCCESS, returned as an error.
type Result int

// CUresult values this package tests for.
const (
	resultSuccess             Result = 0
	resultInvalidValue        Result = 1
	resultOutOfMemory         Result = 2
	resultNotInitialized      Result = 3
	resultDeinitialized       Result = 4
	resultStubLibrary         Result = 34
	resultNoDevice            Result = 100
	resultInvalidDevice       Result = 101
	resultInvalidContext      Result = 201
	resultContextIsDestroyed  Result = 709
	resultInvalidHandle       Result = 400
	resultNotFound            Result = 500
	resultNotReady            Result = 600
	resultAlreadyRegistered   Result = 712
	resultNotRegistered       Result = 713
	resultNotPermitted        Result = 800
	resultNotSupported        Result = 801
	resultUnknown             Result = 999
	resultInvalidAddressSpace Result = 717
	resultIllegalAddress      Result = 700
	resultLaunchTimeout       Result = 702
	resultAssert              Result = 710
	resultHardwareStackError  Result = 714
	resultIllegalInstruction  Result = 715
	resultMisalignedAddress   Result = 716
	resultInvalidPC           Result = 718
	resultLaunchFailed        Result = 719
	resultExternalDevice      Result = 911
	resultContained           Result = 226 // CUDA 12.8
	resultTensorMemoryLeak    Result = 721 // CUDA 12.8
	resultDeviceUnavailable   Result = 46
	resultIllegalState        Result = 401
	// Stream capture (cuda.h: 900 - 908, each a refusal that a capture causes).
	resultCaptureUnsupported Result = 900
	resultCaptureInvalidated Result = 901
	resultCaptureMerge       Result = 902
	resultCaptureUnmatched   Result = 903
	resultCaptureUnjoined    Result = 904
	resultCaptureIsolation   Result = 905
	resultCaptureImplicit    Result = 906
	resultCapturedEvent      Result = 907
	resultCaptureWrongThread Result = 908
)

// errNotReady is resultNotReady as an error, boxed once (check).
var errNotReady error = resultNotReady

// resultNames gives the name and description of common results, used when the driver's
// cuGetErrorName/cuGetErrorString are not available.
var resultNames = map[Result][2]string{
	resultSuccess:             {"CUDA_SUCCESS", "no error"},
	resultInvalidValue:        {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	resultOutOfMemory:         {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	resultNotInitialized:      {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	resultDeinitialized:       {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	resultStubLibrary:         {"CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	resultDeviceUnavailable:   {"CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	resultNoDevice:            {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	resultInvalidDevice:       {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	resultInvalidContext:      {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	resultContextIsDestroyed:  {"CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
	resultInvalidHandle:       {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	resultNotFound:            {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	resultNotReady:            {"CUDA_ERROR_NOT_READY", "device not ready"},
	resultIllegalAddress:      {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	resultLaunchTimeout:       {"CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	resultAssert:              {"CUDA_ERROR_ASSERT", "device-side assert triggered"},
	resultHardwareStackError:  {"CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"},
	resultIllegalInstruction:  {"CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"},
	resultMisalignedAddress:   {"CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
	resultInvalidPC:           {"CUDA_ERROR_INVALID_PC", "invalid program counter"},
	resultLaunchFailed:        {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	resultExternalDevice:      {"CUDA_ERROR_EXTERNAL_DEVICE", "external device error"},
	resultContained:           {"CUDA_ERROR_CONTAINED", "an exception on the device was contained by the GPU's error containment"},
	resultTensorMemoryLeak:    {"CUDA_ERROR_TENSOR_MEMORY_LEAK", "a kernel exited without deallocating its tensor memory"},
	resultAlreadyRegistered:   {"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
	resultNotRegistered:       {"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
	resultInvalidAddressSpace: {"CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"},
	resultNotPermitted:        {"CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	resultNotSupported:        {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	resultUnknown:             {"CUDA_ERROR_UNKNOWN", "unknown error"},
	resultIllegalState:        {"CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
	resultCaptureUnsupported:  {"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"},
	resultCaptureInvalidated:  {"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"},
	resultCaptureMerge:        {"CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"},
	resultCaptureUnmatched:    {"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"},
	resultCaptureUnjoined:     {"CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"},
	resultCaptureIsolation:    {"CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"},
	resultCaptureImplicit:     {"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"},
	resultCapturedEvent:       {"CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"},
	resultCaptureWrongThread:  {"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"},
}

// Error returns "cuda: NAME: description", with the text from cuGetErrorName and
// cuGetErrorString when the driver is loaded, else from a built-in table.
func (r Result) Error() string {
	name, desc, ok := resultText(r)
	if !ok {
		if nd, found := resultNames[r]; found {
			name, desc = nd[0], nd[1]
		} else {
			name, desc = "CUDA_ERROR_"+strconv.Itoa(int(r)), "unrecognized error code"
		}
	}
	return "cuda: " + name + ": " + desc
}

// Is reports whether the result belongs to the class of the sentinel target, for errors.Is.
func (r Result) Is(target error) bool {
	switch target {
	case pinmalloc.ErrInvalidValue:
		return r == resultInvalidValue
	case pinmalloc.ErrOutOfMemory:
		return r == resultOutOfMemory
	case pinmalloc.ErrNoDevice:
		return r == resultNoDevice || r == resultInvalidDevice
	case pinmalloc.ErrNoDriver:
		return r == resultStubLibrary
	case pinmalloc.ErrInvalidHandle:
		return r == resultInvalidHandle
	case pinmalloc.ErrNotReady:
		return r == resultNotReady
	case pinmalloc.ErrAlreadyRegistered:
		return r == resultAlreadyRegistered
	case pinmalloc.ErrNotSupported:
		return r == resultNotSupported
	case pinmalloc.ErrCapturing:
		return r.capture()
	case pinmalloc.ErrDeviceFault:
		return r.sticky()
	case pinmalloc.ErrClosed:
		// The context the call ran in was destroyed: its last primary-context retain released
		// (by another binding, or a Device closed on another thread meanwhile).
		return r == resultContextIsDestroyed
	}
	return false
}

// capture reports the results the driver gives a call refused because of a stream capture
// (cuda.h, 900 - 908): a call not permitted while a stream captures (UNSUPPORTED), on an event
// recorded in one (CAPTURED_EVENT) or on the legacy stream beside one (IMPLICIT); a capture an
// earlier refusal invalidated (INVALIDATED); a dependency that would merge two captures
// (MERGE) or cross a capture's boundary (ISOLATION); and the end of a capture refused: on a
// stream it did not begin on (UNMATCHED), with a fork not joined back (UNJOINED), or on another
// thread than began it (WRONG_THREAD). Each names a capture that the caller, or its user, began:
// pinmalloc.ErrCapturing.
func (r Result) capture() bool {
	return r >= resultCaptureUnsupported && r <= resultCaptureWrongThread
}

// sticky reports the results the driver documents as leaving the process's CUDA state
// inconsistent: every later call of the context returns them (pinmalloc.ErrDeviceFault). A
// kernel killed by the display watchdog (CUDA_ERROR_LAUNCH_TIMEOUT) is one of them, and so are
// CUDA 12.8's CUDA_ERROR_CONTAINED (a fault the GPU's error containment stopped: a bad access
// of a peer's memory over NVLink, some hardware errors) and CUDA_ERROR_TENSOR_MEMORY_LEAK.
func (r Result) sticky() bool {
	switch r {
	case resultIllegalAddress, resultLaunchTimeout, resultAssert, resultHardwareStackError,
		resultIllegalInstruction, resultMisalignedAddress, resultInvalidAddressSpace, resultInvalidPC,
		resultLaunchFailed, resultExternalDevice, resultContained, resultTensorMemoryLeak:
		return true
	}
	return false
}

// wrapped is an error of this package that says what failed around its cause: "cuda: WHAT:
// CAUSE", the cause's own "cuda: " left out, so that the message says it once (a Result and the
// driver's sentinels begin with it). With a kind, it matches that sentinel too.
type wrapped struct {
	what string
	kind error // a sentinel the error matches besides its cause's, or nil
	err  error
}

// wrap returns err with what failed, said as format and args give it, before it; the cause
// stays in the chain (errors.Is, errors.As).
func wrap(err error, format string, args ...any) error {
	return &wrapped{what: fmt.Sprintf(format, args...), err: err}
}

func (w *wrapped) Error() string {
	return "cuda: " + w.what + ": " + strings.TrimPrefix(w.err.Error(), "cuda: ")
}

func (w *wrapped) Unwrap() error { return w.err }

// Is reports whether target is the error's kind, for errors.Is.
func (w *wrapped) Is(target error) bool { return w.kind != nil && target == w.kind }
