//go:build cgo && linux

package cuda

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

func TestSymbolTableComplete(t *testing.T) {
	for id, e := range symbols {
		if e.name == "" || e.dlsym == "" || e.version < 12000 {
			t.Errorf("symbols[%d] = %+v is incomplete", id, e)
		}
		if !strings.HasPrefix(e.dlsym, e.name) {
			t.Errorf("symbols[%d]: dlsym name %q is not a version of %q", id, e.dlsym, e.name)
		}
	}
}

// TestMissingSymbol loads a library that is not a driver (libc) and checks that asking for an
// entry point gives an error wrapping ErrSymbol that names it, not a crash.
func TestMissingSymbol(t *testing.T) {
	dr, err := loadFrom("libc.so.6")
	if err != nil {
		t.Skipf("cannot load libc.so.6 to stand in for a driver: %v", err)
	}
	defer dr.close()
	if dr.getProc != 0 {
		t.Fatalf("libc has cuGetProcAddress_v2?")
	}
	_, err = dr.memAlloc(1 << 20)
	if !errors.Is(err, pinmalloc.ErrSymbol) {
		t.Fatalf("memAlloc on libc = %v, want pinmalloc.ErrSymbol", err)
	}
	if !strings.Contains(err.Error(), "cuMemAlloc_v2") {
		t.Errorf("error %q does not name cuMemAlloc_v2", err)
	}
	// The failure is remembered: the second call gives the same error without a lookup.
	_, err2 := dr.memAlloc(1)
	if err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second call = %v, want %v", err2, err)
	}
	if err := dr.memPrefetchAsync(0, 0, hostLoc, 0); !errors.Is(err, pinmalloc.ErrSymbol) ||
		!strings.Contains(err.Error(), "cuMemPrefetchAsync_v2") {
		t.Errorf("memPrefetchAsync on libc = %v", err)
	}
	// The memory pool entry points (issue 26): each a named ErrSymbol where the driver lacks it.
	_, errCreate := dr.memPoolCreate(MemPoolProps{Location: MemLocation{Type: LocationHostNUMA}})
	_, errAlloc := dr.memAllocFromPoolAsync(1, 1, 0)
	for _, c := range []struct {
		err  error
		name string
	}{{errCreate, "cuMemPoolCreate"}, {errAlloc, "cuMemAllocFromPoolAsync"}, {dr.memPoolSetAccess(1, []MemLocation{{Type: LocationDevice}}, false), "cuMemPoolSetAccess"},
		{dr.memPoolSetAttribute(1, PoolAttrReleaseThreshold, 1), "cuMemPoolSetAttribute"}, {dr.memPoolTrimTo(1, 0), "cuMemPoolTrimTo"},
		{dr.memPoolDestroy(1), "cuMemPoolDestroy"}} {
		if !errors.Is(c.err, pinmalloc.ErrSymbol) || !strings.Contains(c.err.Error(), c.name) {
			t.Errorf("%s on libc = %v, want pinmalloc.ErrSymbol naming it", c.name, c.err)
		}
	}
	// Stream capture: a driver without it answers each call with a named ErrSymbol.
	_, errEnd := dr.streamEndCapture(1)
	_, errIs := dr.streamIsCapturingIn(1, 1)
	for _, c := range []struct {
		err  error
		name string
	}{{dr.streamBeginCapture(1, CaptureGlobal), "cuStreamBeginCapture_v2"}, {errEnd, "cuStreamEndCapture"},
		{errIs, "cuStreamIsCapturing"}, {dr.graphDestroy(1), "cuGraphDestroy"}} {
		if !errors.Is(c.err, pinmalloc.ErrSymbol) || !strings.Contains(c.err.Error(), c.name) {
			t.Errorf("%s on libc = %v, want pinmalloc.ErrSymbol naming it", c.name, c.err)
		}
	}
}

// TestDLErrorSurvivesOtherDLCalls: the message of a failed dlopen or dlsym is read after the C
// call returned, when the goroutine may have left its thread and another goroutine made a dl
// call there (another library's dlopen: nvml's). glibc frees the text dlerror gave at the next
// dl call of the thread, so a message kept as dlerror's pointer was read from freed memory.
// dlFailed makes that call on the same thread (locked) between the failed call and the read.
func TestDLErrorSurvivesOtherDLCalls(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	other := func() { nvml.Open("/nonexistent/pinmalloc/other/libnvidia-ml.so.1").Init() }
	const path = "/nonexistent/pinmalloc/libcuda.so.1"
	_, want := loadFrom(path)
	lib1, err := loadFrom("libc.so.6")
	if err != nil {
		t.Skipf("cannot load libc.so.6 to stand in for a driver: %v", err)
	}
	defer lib1.close()
	_, wantSym := lib1.memAlloc(1)

	dlFailed = other
	defer func() { dlFailed = nil }()
	if _, got := loadFrom(path); got == nil || want == nil || got.Error() != want.Error() {
		t.Errorf("loadFrom(%q) with a dl call between its dlopen and the read of its message:\n"+
			"got  %q\nwant %q", path, got, want)
	}
	lib2, err := loadFrom("libc.so.6")
	must(t, "loadFrom(libc.so.6)", err)
	defer lib2.close()
	if _, got := lib2.memAlloc(1); got == nil || wantSym == nil || got.Error() != wantSym.Error() {
		t.Errorf("a missing symbol with a dl call between its dlsym and the read of its message:\n"+
			"got  %q\nwant %q", got, wantSym)
	}
}
