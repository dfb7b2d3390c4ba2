package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestCaptureUnsafeBesideGlobal: beside another thread's GLOBAL capture, a thread in the
// default GLOBAL mode may not make a potentially unsafe call: cuMemAlloc and cuMemFree there
// are refused with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and free or allocate nothing (D:
// cuThreadExchangeStreamCaptureMode, GLOBAL: "if any other thread has a concurrent capture
// sequence initiated with CU_STREAM_CAPTURE_MODE_GLOBAL, this thread is prohibited from
// potentially unsafe API calls", cudaMalloc being the one it names). The fake invalidates the
// capture (UNMEASURED: on a GPU the end's answer is logged, and a valid graph is accepted too).
func TestCaptureUnsafeBesideGlobal(t *testing.T) { onFake(t, captureUnsafeBesideGlobal) }

func captureUnsafeBesideGlobal(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	p, err := d.MemAlloc(4096)
	must(t, "MemAlloc", err)
	onThread := func(f func() error) error { // another thread than the test's, in GLOBAL mode
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // unlocked: the thread exits
			done <- f()
		}()
		return <-done
	}
	endEither := func(what string) {
		g, err := d.StreamEndCapture(x.s)
		t.Logf("driver: StreamEndCapture after %s = %#x, %v", what, g, err)
		if g != 0 {
			_ = d.GraphDestroy(g)
		}
	}
	capture(t, d, x.s, cuda.CaptureGlobal)
	var q cuda.DevicePtr
	err = onThread(func() (e error) { q, e = d.MemAlloc(4096); return })
	answer(t, "MemAlloc on another thread in GLOBAL mode beside a GLOBAL capture", err, codeCaptureUnsupported)
	if err == nil {
		defer func() { must(t, "MemFree", d.MemFree(q)) }()
	}
	endEither("MemAlloc on another thread")
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemFree on another thread in GLOBAL mode beside a GLOBAL capture",
		onThread(func() error { return d.MemFree(p) }), codeCaptureUnsupported)
	endEither("MemFree on another thread")
	_ = d.MemFree(p) // kept by the refusal (if the driver freed it, the test has said so above)
}
