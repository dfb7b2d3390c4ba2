//go:build cgo && linux

package nvml

import "testing"

// TestOpenPathWithNUL: a path holding a NUL byte names no file (C would read it cut short, and
// load the library named by its first part): Init answers ErrorLibraryNotFound and loads
// nothing.
func TestOpenPathWithNUL(t *testing.T) {
	lib := Open(fakeLibrary(t) + "\x00.absent")
	if r := lib.Init(); r != ErrorLibraryNotFound {
		if r == Success {
			lib.Shutdown()
		}
		t.Fatalf("Init of a path with a NUL = %v, want ErrorLibraryNotFound", r)
	}
	if s := lib.(*system); s.loaded {
		t.Error("a path with a NUL loaded a library")
	}
}
