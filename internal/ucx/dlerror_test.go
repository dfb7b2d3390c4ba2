//go:build cgo && linux

package ucx

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// TestDLErrorSurvivesOtherDLCalls: the message of a failed dlopen or dlsym is the one dlerror
// gave for it, even when another library makes a dl call on the thread before the message is
// read (a goroutine left the thread meanwhile). The message was read from dlerror's text after
// the C call had returned, and glibc frees that text at the thread's next dl call: it came out
// as garbage, or as another library's error.
func TestDLErrorSurvivesOtherDLCalls(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	other := func() { nvml.Open("/nonexistent/pinmalloc/other/libnvidia-ml.so.1").Init() }
	const path = "/nonexistent/pinmalloc/libucp.so.0"
	_, want := open(path)
	l, err := open("libc.so.6") // a library without UCX's symbols
	if err != nil {
		t.Skipf("cannot load libc.so.6 to stand in for UCX: %v", err)
	}
	_, wantSym := l.fn(0)
	dlFailed = other
	defer func() { dlFailed = nil }()
	if _, got := open(path); got == nil || want == nil || got.Error() != want.Error() {
		t.Errorf("open(%q) with a dl call between its dlopen and the read of its message:\n"+
			"got  %q\nwant %q", path, got, want)
	}
	l2, err := open("libc.so.6")
	if err != nil {
		t.Fatal(err)
	}
	if _, got := l2.fn(0); got == nil || wantSym == nil || got.Error() != wantSym.Error() {
		t.Errorf("a missing symbol with a dl call between its dlsym and the read of its message:\n"+
			"got  %q\nwant %q", got, wantSym)
	}
}
