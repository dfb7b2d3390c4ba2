package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

func TestResultIs(t *testing.T) {
	cases := []struct {
		r    Result
		want error
	}{
		{1, pinmalloc.ErrInvalidValue},
		{2, pinmalloc.ErrOutOfMemory},
		{34, pinmalloc.ErrNoDriver},
		{100, pinmalloc.ErrNoDevice},
		{101, pinmalloc.ErrNoDevice},
		{400, pinmalloc.ErrInvalidHandle},
		{600, pinmalloc.ErrNotReady},
		{712, pinmalloc.ErrAlreadyRegistered},
		{801, pinmalloc.ErrNotSupported},
		// The sticky results: the device faulted, and the process must exit to use CUDA again.
		{700, pinmalloc.ErrDeviceFault}, // ILLEGAL_ADDRESS
		{702, pinmalloc.ErrDeviceFault}, // LAUNCH_TIMEOUT (a watchdog killed the kernel)
		{710, pinmalloc.ErrDeviceFault}, // ASSERT
		{714, pinmalloc.ErrDeviceFault}, // HARDWARE_STACK_ERROR
		{715, pinmalloc.ErrDeviceFault}, // ILLEGAL_INSTRUCTION
		{716, pinmalloc.ErrDeviceFault}, // MISALIGNED_ADDRESS
		{717, pinmalloc.ErrDeviceFault}, // INVALID_ADDRESS_SPACE
		{718, pinmalloc.ErrDeviceFault}, // INVALID_PC
		{719, pinmalloc.ErrDeviceFault}, // LAUNCH_FAILED
		{911, pinmalloc.ErrDeviceFault}, // EXTERNAL_DEVICE
		{226, pinmalloc.ErrDeviceFault}, // CONTAINED (CUDA 12.8: an NVLink or hardware fault contained)
		{721, pinmalloc.ErrDeviceFault}, // TENSOR_MEMORY_LEAK (CUDA 12.8)
		{709, pinmalloc.ErrClosed},      // CONTEXT_IS_DESTROYED
		// Every refusal the driver gives because of a stream capture (cuda.h, 900 - 908).
		{900, pinmalloc.ErrCapturing}, // STREAM_CAPTURE_UNSUPPORTED
		{901, pinmalloc.ErrCapturing}, // STREAM_CAPTURE_INVALIDATED
		{902, pinmalloc.ErrCapturing}, // STREAM_CAPTURE_MERGE
		{903, pinmalloc.ErrCapturing}, // STREAM_CAPTURE_UNMATCHED
		{904, pinmalloc.ErrCapturing}, // STREAM_CAPTURE_UNJOINED
		{905, pinmalloc.ErrCapturing}, // STREAM_CAPTURE_ISOLATION
		{906, pinmalloc.ErrCapturing}, // STREAM_CAPTURE_IMPLICIT
		{907, pinmalloc.ErrCapturing}, // CAPTURED_EVENT
		{908, pinmalloc.ErrCapturing}, // STREAM_CAPTURE_WRONG_THREAD
	}
	sentinels := []error{pinmalloc.ErrNoDriver, pinmalloc.ErrNoDevice, pinmalloc.ErrSymbol, pinmalloc.ErrOutOfMemory, pinmalloc.ErrInvalidValue,
		pinmalloc.ErrNotSupported, pinmalloc.ErrInvalidHandle, pinmalloc.ErrNotReady, pinmalloc.ErrAlreadyRegistered,
		pinmalloc.ErrDeviceFault, pinmalloc.ErrClosed, pinmalloc.ErrCapturing}
	for _, c := range cases {
		var err error = c.r
		for _, s := range sentinels {
			if got := errors.Is(err, s); got != (s == c.want) {
				t.Errorf("errors.Is(Result(%d), %v) = %v", int(c.r), s, got)
			}
		}
	}
	// Codes without a sentinel match none.
	for _, r := range []Result{3, 201, 401, 500, 713, 720, 909, 999} {
		for _, s := range sentinels {
			if errors.Is(r, s) {
				t.Errorf("errors.Is(Result(%d), %v) = true", int(r), s)
			}
		}
	}
}

func TestResultError(t *testing.T) {
	msg := Result(2).Error()
	if !strings.HasPrefix(msg, "cuda: CUDA_ERROR_OUT_OF_MEMORY: ") || !strings.Contains(msg, "out of memory") {
		t.Errorf("Result(2).Error() = %q", msg)
	}
	if msg := Result(712).Error(); !strings.Contains(msg, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED") {
		t.Errorf("Result(712).Error() = %q", msg)
	}
	// Every capture refusal says which one, driver or not (the fake's cuGetErrorName knows only
	// those it gives).
	if loaded.Load() == nil {
		names := map[Result]string{902: "MERGE", 903: "UNMATCHED", 904: "UNJOINED", 905: "ISOLATION"}
		for r, name := range names {
			if msg := r.Error(); !strings.Contains(msg, "CUDA_ERROR_STREAM_CAPTURE_"+name) {
				t.Errorf("Result(%d).Error() = %q", int(r), msg)
			}
		}
	}
	msg = Result(12345).Error()
	if !strings.HasPrefix(msg, "cuda: ") || (loaded.Load() == nil && !strings.Contains(msg, "12345")) {
		t.Errorf("Result(12345).Error() = %q", msg)
	}
	// A wrapped Result is still found by errors.As.
	var r Result
	if err := error(Result(600)); !errors.As(errors.Join(errors.New("x"), err), &r) || r != 600 {
		t.Errorf("errors.As did not find Result 600, got %d", int(r))
	}
}

func TestLoadFromMissingPath(t *testing.T) {
	const path = "/nonexistent/pinmalloc/libcuda.so.1"
	dr, err := loadFrom(path)
	if err == nil {
		dr.close()
		t.Fatalf("loadFrom(%q) succeeded", path)
	}
	if !errors.Is(err, pinmalloc.ErrNoDriver) {
		t.Errorf("loadFrom error %v does not match pinmalloc.ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("loadFrom error %q does not name the path", err)
	}
}

func TestLoadWithoutDriver(t *testing.T) {
	err := Load()
	if err == nil {
		t.Skip("a CUDA driver is present; the no-driver path is not testable here")
	}
	if !errors.Is(err, pinmalloc.ErrNoDriver) {
		t.Fatalf("Load() = %v, want an error matching pinmalloc.ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Errorf("Load() error %q does not name libcuda.so.1", err)
	}
	if err2 := Load(); err2 != err {
		t.Errorf("second Load() = %v, want the first result %v", err2, err)
	}
	if n, err := Count(); n != 0 || !errors.Is(err, pinmalloc.ErrNoDriver) {
		t.Errorf("Count() = %d, %v; want 0 and pinmalloc.ErrNoDriver", n, err)
	}
	if _, err := DriverVersion(); !errors.Is(err, pinmalloc.ErrNoDriver) {
		t.Errorf("DriverVersion() error = %v, want pinmalloc.ErrNoDriver", err)
	}
	d, err := Open(0)
	if d != nil || !errors.Is(err, pinmalloc.ErrNoDriver) {
		t.Errorf("Open(0) = %v, %v; want nil and pinmalloc.ErrNoDriver", d, err)
	}
	if n := PrimaryRetains(); n != 0 {
		t.Errorf("PrimaryRetains() = %d after failed Open", n)
	}
}

func TestStatsLive(t *testing.T) {
	s := Stats{DeviceAllocs: 1, Events: 2, Handles: 3}
	if s.Live() != 6 {
		t.Errorf("Live() = %d, want 6", s.Live())
	}
	if (Stats{}).Live() != 0 {
		t.Errorf("zero Stats not zero")
	}
}

// Locations and advice as cuda.h numbers them (CU_MEM_LOCATION_TYPE_*, CU_MEM_ADVISE_*), for
// the tests of this binding; the typed vocabulary is the public package's.
const (
	locDevice = 1
	locHost   = 2

	adviseSetReadMostly          = 1
	adviseUnsetReadMostly        = 2
	adviseSetPreferredLocation   = 3
	adviseUnsetPreferredLocation = 4
	adviseSetAccessedBy          = 5
)

// hostLoc is the host as a location.
var hostLoc = MemLocation{Type: locHost}

// deviceLoc is device d as a location.
func deviceLoc(d *Device) MemLocation { return MemLocation{Type: locDevice, ID: int32(d.Ordinal())} }
