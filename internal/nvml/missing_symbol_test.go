//go:build cgo && linux

package nvml

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// mapped reports whether the file at path is mapped into this process (/proc/self/maps).
func mapped(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	return strings.Contains(string(b), path)
}

// TestBindingWithoutInitOrShutdown: a library lacking nvmlInit_v2 or nvmlShutdown is no NVML
// a session can open and close. Init answers ErrorFunctionNotFound without calling anything,
// so Discover's error matches ErrUnavailable, and the library is closed again (dlclose: no
// longer mapped), not kept for the life of the process. Without nvmlShutdown, an Init that
// succeeded could never be ended.
func TestBindingWithoutInitOrShutdown(t *testing.T) {
	for _, def := range []string{"-DNO_INIT", "-DNO_SHUTDOWN"} {
		path := fakeLibrary(t, def)
		lib := Open(path)
		if r := lib.Init(); r != ErrorFunctionNotFound {
			t.Errorf("%s: Init = %v, want ErrorFunctionNotFound", def, r)
		}
		if mapped(t, path) {
			t.Errorf("%s: the library is still mapped after the refused Init", def)
		}
		_, err := Discover(lib)
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrorFunctionNotFound) {
			t.Errorf("%s: Discover = %v, want ErrUnavailable and ErrorFunctionNotFound", def, err)
		}
		if _, r := lib.DeviceGetCount(); r != ErrorUninitialized {
			t.Errorf("%s: DeviceGetCount = %v, want ErrorUninitialized", def, r)
		}
	}
}
