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

// resultNames gives the name and description of every result of cuda.h's CUresult enum (CUDA
// 13.0), used when the driver's cuGetErrorName/cuGetErrorString are not available or do not
// name the code (TestResultNamesMatchTheEnum checks it against the enum).
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
	// The rest of cuda.h's CUresult enum, codes this package does not test for.
	5:   {"CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
	6:   {"CUDA_ERROR_PROFILER_NOT_INITIALIZED", "profiler not initialized"},
	7:   {"CUDA_ERROR_PROFILER_ALREADY_STARTED", "profiler already started"},
	8:   {"CUDA_ERROR_PROFILER_ALREADY_STOPPED", "profiler already stopped"},
	36:  {"CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", "the call requires a newer CUDA driver"},
	102: {"CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"},
	200: {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	202: {"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
	205: {"CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
	206: {"CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
	207: {"CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
	208: {"CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
	209: {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	210: {"CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
	211: {"CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
	212: {"CUDA_ERROR_NOT_MAPPED_AS_ARRAY", "resource not mapped as array"},
	213: {"CUDA_ERROR_NOT_MAPPED_AS_POINTER", "resource not mapped as pointer"},
	214: {"CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
	215: {"CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"},
	216: {"CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread"},
	217: {"CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"},
	218: {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	219: {"CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid OpenGL or DirectX context"},
	220: {"CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution"},
	221: {"CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
	222: {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain"},
	223: {"CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"},
	224: {"CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported"},
	225: {"CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "the provided PTX contains unsupported call to cudaDeviceSynchronize"},
	300: {"CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
	301: {"CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
	302: {"CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"},
	303: {"CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"},
	304: {"CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	402: {"CUDA_ERROR_LOSSY_QUERY", "attempted introspection would be semantically lossy"},
	701: {"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
	703: {"CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode"},
	704: {"CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"},
	705: {"CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"},
	708: {"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "cannot set while device is active in this process"},
	711: {"CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"},
	720: {"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"},
	802: {"CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	803: {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	804: {"CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
	805: {"CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS client failed to connect to the MPS control daemon or the MPS server"},
	806: {"CUDA_ERROR_MPS_RPC_FAILURE", "the remote procedural call between the MPS server and the MPS client failed"},
	807: {"CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server is not ready to accept new MPS client requests"},
	808: {"CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "the hardware resources required to create MPS client have been exhausted"},
	809: {"CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "the hardware resources required to support device connections have been exhausted"},
	810: {"CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client has been terminated by the server"},
	811: {"CUDA_ERROR_CDP_NOT_SUPPORTED", "CUDA Dynamic Parallelism is not supported in this configuration"},
	812: {"CUDA_ERROR_CDP_VERSION_MISMATCH", "unsupported interaction between different versions of CUDA Dynamic Parallelism"},
	909: {"CUDA_ERROR_TIMEOUT", "wait operation timed out"},
	910: {"CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"},
	912: {"CUDA_ERROR_INVALID_CLUSTER_SIZE", "invalid cluster size"},
	913: {"CUDA_ERROR_FUNCTION_NOT_LOADED", "function not loaded"},
	914: {"CUDA_ERROR_INVALID_RESOURCE_TYPE", "invalid resource type"},
	915: {"CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "invalid resource configuration"},
	916: {"CUDA_ERROR_KEY_ROTATION", "an error occurred during key rotation"},
	917: {"CUDA_ERROR_STREAM_DETACHED", "the stream is detached"},
}

// DriverResult returns r's code: errkind.Once says one failure once by it (two errors holding
// the same result say the same).
func (r Result) DriverResult() int { return int(r) }

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
