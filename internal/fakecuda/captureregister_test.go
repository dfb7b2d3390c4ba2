package fakecuda

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestCaptureUnsafeRegister: cuMemHostRegister is a potentially unsafe call (R, vllm#46933: a
// cudaHostRegister beside a CUDA graph capture failed with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900): during a capture begun GLOBAL it is refused, on
// the capturing thread and on another thread in the default GLOBAL mode, and the memory stays
// unregistered; beside a THREAD_LOCAL capture another thread may register, and the capturing
// thread beside a RELAXED one. The fake invalidates the capture that forbade the call
// (unmeasured; on a GPU the end's answer is logged). cuMemHostUnregister is not held to it:
// no report says whether the driver refuses it.
func TestCaptureUnsafeRegister(t *testing.T) { onFake(t, captureUnsafeRegister) }

func captureUnsafeRegister(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	b, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "Mmap", err)
	defer func() { must(t, "Munmap", unix.Munmap(b)) }()
	p := mem.Addr(b)
	endEither := func(what string) {
		g, err := d.StreamEndCapture(x.s)
		t.Logf("driver: StreamEndCapture after %s = %#x, %v", what, g, err)
		if g != 0 {
			_ = d.GraphDestroy(g)
		}
	}
	onThread := func(mode cuda.CaptureMode) error { // another thread than the test's, in mode
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // unlocked: the thread exits
			prev, err := d.ThreadExchangeCaptureMode(mode)
			if err == nil {
				err = d.MemHostRegister(p, uintptr(len(b)), 0)
				_, _ = d.ThreadExchangeCaptureMode(prev)
			}
			done <- err
		}()
		return <-done
	}
	// registered reports whether p is registered, ending the registration.
	registered := func() bool { return d.MemHostUnregister(p) == nil }

	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemHostRegister during a GLOBAL capture", d.MemHostRegister(p, uintptr(len(b)), 0),
		codeCaptureUnsupported)
	endEither("MemHostRegister")
	if registered() {
		t.Error("a MemHostRegister refused during a capture registered the memory")
	}
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemHostRegister on another thread in GLOBAL mode beside a GLOBAL capture",
		onThread(cuda.CaptureGlobal), codeCaptureUnsupported)
	endEither("MemHostRegister on another thread")
	if registered() {
		t.Error("a MemHostRegister refused beside a capture registered the memory")
	}
	capture(t, d, x.s, cuda.CaptureThreadLocal)
	answer(t, "MemHostRegister on another thread beside a THREAD_LOCAL capture",
		onThread(cuda.CaptureGlobal), 0)
	endValid(t, d, x.s)
	if !registered() {
		t.Error("MemHostRegister beside a THREAD_LOCAL capture did not register the memory")
	}
	capture(t, d, x.s, cuda.CaptureRelaxed)
	answer(t, "MemHostRegister during a RELAXED capture",
		d.MemHostRegister(p, uintptr(len(b)), 0), 0)
	endValid(t, d, x.s)
	if !registered() {
		t.Error("MemHostRegister during a RELAXED capture did not register the memory")
	}
}
