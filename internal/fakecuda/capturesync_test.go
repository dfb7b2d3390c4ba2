package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestCaptureSyncCopiesBeside: the synchronous copies and memset (cuMemcpyHtoD, cuMemcpyDtoH of
// pinned memory, cuMemcpyDtoD, cuMemsetD8), which queue on the legacy stream, are allowed
// beside a GLOBAL capture of a non-blocking stream, on the capturing thread and on another
// thread in the default GLOBAL mode, and leave the capture valid. The fake's choice, UNMEASURED:
// the driver API names cudaMalloc as a potentially unsafe call and gives no list, and no
// report says it refuses these (device.Free's scrub and device's copies make them without
// relaxing the thread's mode); TestCUDACaptureRules asks a GPU, where an answer that differs
// fails the rule and the fake must follow it.
func TestCaptureSyncCopiesBeside(t *testing.T) { onFake(t, captureSyncCopiesBeside) }

func captureSyncCopiesBeside(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	calls := []struct {
		name string
		call func() error
	}{
		{"MemcpyHtoD", func() error { return d.MemcpyHtoD(x.dev, x.host, x.n) }},
		{"MemcpyDtoH", func() error { return d.MemcpyDtoH(x.host+x.n, x.dev, x.n) }},
		{"MemcpyDtoD", func() error { return d.MemcpyDtoD(x.dev2, x.dev, x.n) }},
		{"MemsetD8", func() error { return d.MemsetD8(x.dev, 1, x.n) }},
	}
	onThread := func(f func() error) error { // another thread than the test's, in GLOBAL mode
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // unlocked: the thread exits
			done <- f()
		}()
		return <-done
	}
	for _, c := range calls {
		capture(t, d, x.s, cuda.CaptureGlobal)
		answer(t, c.name+" on the thread capturing a non-blocking stream GLOBAL", c.call(), 0)
		endValid(t, d, x.s)

		capture(t, d, x.s, cuda.CaptureGlobal)
		answer(t, c.name+" on another thread beside a GLOBAL capture of a non-blocking stream",
			onThread(c.call), 0)
		endValid(t, d, x.s)
	}
	must(t, "Synchronize", d.Synchronize())
}
