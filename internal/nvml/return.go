package nvml

import "fmt"

// Return is an NVML return code (nvmlReturn_t). Every value but Success is an error, so a
// failure wrapped with %w can be tested with errors.Is(err, nvml.ErrorGPUIsLost).
type Return int32

// The return codes this package and its callers test for, with nvml.h's values.
const (
	Success               Return = 0
	ErrorUninitialized    Return = 1
	ErrorInvalidArgument  Return = 2
	ErrorNotSupported     Return = 3
	ErrorNoPermission     Return = 4
	ErrorNotFound         Return = 6
	ErrorInsufficientSize Return = 7
	ErrorDriverNotLoaded  Return = 9
	ErrorLibraryNotFound  Return = 12
	ErrorFunctionNotFound Return = 13
	ErrorGPUIsLost        Return = 15
	ErrorArgumentVersion  Return = 25 // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
	ErrorUnknown          Return = 999
)

var returnNames = map[Return]string{
	Success:               "NVML_SUCCESS",
	ErrorUninitialized:    "NVML_ERROR_UNINITIALIZED",
	ErrorInvalidArgument:  "NVML_ERROR_INVALID_ARGUMENT",
	ErrorNotSupported:     "NVML_ERROR_NOT_SUPPORTED",
	ErrorNoPermission:     "NVML_ERROR_NO_PERMISSION",
	ErrorNotFound:         "NVML_ERROR_NOT_FOUND",
	ErrorInsufficientSize: "NVML_ERROR_INSUFFICIENT_SIZE",
	ErrorDriverNotLoaded:  "NVML_ERROR_DRIVER_NOT_LOADED",
	ErrorLibraryNotFound:  "NVML_ERROR_LIBRARY_NOT_FOUND",
	ErrorFunctionNotFound: "NVML_ERROR_FUNCTION_NOT_FOUND",
	ErrorGPUIsLost:        "NVML_ERROR_GPU_IS_LOST",
	ErrorArgumentVersion:  "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
	ErrorUnknown:          "NVML_ERROR_UNKNOWN",
}

// Error names the code as nvml.h does, or gives its number.
func (r Return) Error() string {
	if s, ok := returnNames[r]; ok {
		return s
	}
	return fmt.Sprintf("NVML return %d", int32(r))
}
