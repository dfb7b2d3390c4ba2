package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestCapturePoolAttributes: cuMemPoolGetAttribute and cuMemPoolSetAttribute are potentially
// unsafe calls (R, NVIDIA/cccl#11360 and NVIDIA/cuda-python#2834: reading or writing a pool's
// release threshold "while the calling thread is inside a global or thread-local stream capture"
// fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900, and "a global capture on another thread
// is invalidated too"): during a GLOBAL capture each is refused, on the capturing thread and on
// another thread in the default GLOBAL mode, and a refused set changes nothing; during a
// THREAD_LOCAL capture the capturing thread is refused and another thread answered; during a
// RELAXED capture both are answered. cuDeviceGetDefaultMemPool is a query the capture allows
// (cccl#11360). The fake invalidates the capture that forbade the call (the reports say so of
// the driver; on a GPU the end's answer is logged).
func TestCapturePoolAttributes(t *testing.T) { onFake(t, capturePoolAttributes) }

func capturePoolAttributes(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	const attr = cuda.PoolAttrReleaseThreshold
	p, err := d.DefaultMemPool()
	must(t, "DefaultMemPool", err)
	old, err := d.MemPoolGetAttribute(p, attr)
	must(t, "MemPoolGetAttribute", err)
	defer func() { must(t, "MemPoolSetAttribute back", d.MemPoolSetAttribute(p, attr, old)) }()
	endEither := func(what string) {
		g, err := d.StreamEndCapture(x.s)
		t.Logf("driver: StreamEndCapture after %s = %#x, %v", what, g, err)
		if g != 0 {
			_ = d.GraphDestroy(g)
		}
	}
	get := func() error { _, err := d.MemPoolGetAttribute(p, attr); return err }
	onThread := func(f func() error) error { // another thread than the test's, in GLOBAL mode
		done := make(chan error)
		go func() {
			runtime.LockOSThread() // unlocked: the thread exits
			done <- f()
		}()
		return <-done
	}

	capture(t, d, x.s, cuda.CaptureGlobal)
	if q, err := d.DefaultMemPool(); err != nil || q != p {
		t.Errorf("DefaultMemPool during a GLOBAL capture = %#x, %v; want %#x", q, err, p)
	}
	answer(t, "MemPoolGetAttribute during a GLOBAL capture", get(), codeCaptureUnsupported)
	endEither("MemPoolGetAttribute")
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemPoolSetAttribute during a GLOBAL capture",
		d.MemPoolSetAttribute(p, attr, old+4096), codeCaptureUnsupported)
	endEither("MemPoolSetAttribute")
	if v, err := d.MemPoolGetAttribute(p, attr); err != nil || v != old {
		t.Errorf("release threshold after a refused set = %d, %v; want %d", v, err, old)
	}
	capture(t, d, x.s, cuda.CaptureGlobal)
	answer(t, "MemPoolGetAttribute on another thread in GLOBAL mode beside a GLOBAL capture",
		onThread(get), codeCaptureUnsupported)
	endEither("MemPoolGetAttribute on another thread")
	capture(t, d, x.s, cuda.CaptureThreadLocal)
	answer(t, "MemPoolGetAttribute during a THREAD_LOCAL capture", get(), codeCaptureUnsupported)
	endEither("MemPoolGetAttribute in a THREAD_LOCAL capture")
	capture(t, d, x.s, cuda.CaptureThreadLocal)
	answer(t, "MemPoolGetAttribute on another thread beside a THREAD_LOCAL capture",
		onThread(get), 0)
	endValid(t, d, x.s)
	capture(t, d, x.s, cuda.CaptureRelaxed)
	answer(t, "MemPoolGetAttribute during a RELAXED capture", get(), 0)
	answer(t, "MemPoolSetAttribute during a RELAXED capture", d.MemPoolSetAttribute(p, attr, old), 0)
	endValid(t, d, x.s)
}
