package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestCaptureHostAllocBeside: cuMemHostAlloc is allowed during a GLOBAL capture, on the
// capturing thread and on another thread in GLOBAL mode, and leaves the capture valid. The
// fake's choice, UNMEASURED: the driver API names cudaMalloc as a potentially unsafe call and
// gives no list; cuMemFreeHost, which synchronizes, is refused (TestCaptureUnsafeAllocFree),
// and so is cuMemHostRegister (TestCaptureUnsafeRegister, reported). pinmalloc's providers
// allocate pinned memory in the RELAXED mode, so either answer leaves them working;
// TestCUDACaptureRules asks a GPU, where an answer that differs fails the rule and the fake must
// follow it.
func TestCaptureHostAllocBeside(t *testing.T) { onFake(t, captureHostAllocBeside) }

func captureHostAllocBeside(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	var hs []uintptr
	defer func() {
		for _, h := range hs {
			must(t, "MemFreeHost", d.MemFreeHost(h))
		}
	}()
	alloc := func() error {
		h, err := d.MemHostAlloc(4096, 0)
		if err == nil {
			hs = append(hs, h)
		}
		return err
	}
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemHostAlloc on the thread capturing GLOBAL", alloc(), 0)
	endValid(t, d, x.s)

	capture(t, d, x.s, cuda.CaptureGlobal)
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // another thread than the test's, in GLOBAL mode; it exits
		done <- alloc()
	}()
	answer(t, "MemHostAlloc on another thread in GLOBAL mode beside a GLOBAL capture", <-done, 0)
	endValid(t, d, x.s)
}
