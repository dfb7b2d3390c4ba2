package pinned_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/copyengine"
	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeStreamCheckAfterFault: once a kernel has faulted (the context's sticky error), the
// driver refuses every stream, so one the pool or a device heap has not seen cannot be
// checked. FreeAsync and the heap's Alloc on such a stream say that the device faulted
// (ErrDeviceFault, of kind pinmalloc.ErrDeviceFault, the driver's error in the chain) and
// change nothing: the buffer stays the caller's, and a plain Free takes it. Before, both said
// that the stream was invalid (ErrInvalidStream), which sent the user looking for a bad
// stream in a context that had failed.
func TestFakeStreamCheckAfterFault(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	b, err := r.pool.Alloc(4096)
	ok(t, "Alloc", err)
	fresh := pubcuda.Stream(r.stream()) // made before the fault, seen by neither

	d, err := r.dev.MemAlloc(4096)
	ok(t, "MemAlloc", err)
	release := r.faultKernel(d)

	err = r.pool.FreeAsync(b, fresh)
	if !errors.Is(err, pinned.ErrDeviceFault) || !errors.Is(err, pubcuda.ErrDeviceFault) ||
		!errors.Is(err, pinmalloc.ErrDeviceFault) || errors.Is(err, pinned.ErrInvalidStream) {
		t.Errorf("FreeAsync on a new stream after a fault: %v; want pinned.ErrDeviceFault, not ErrInvalidStream", err)
	}
	_, err = r.heap.Alloc(4096, fresh)
	if !errors.Is(err, device.ErrDeviceFault) || !errors.Is(err, pubcuda.ErrDeviceFault) || errors.Is(err, device.ErrInvalidStream) {
		t.Errorf("a device heap's Alloc on a new stream after a fault: %v; want device.ErrDeviceFault, not ErrInvalidStream", err)
	}

	r.f.ClearStickyError()
	if st := r.pool.Stats(); st.Live != 1 || st.Deferred != 0 {
		t.Errorf("after the refused FreeAsync: %d live, %d deferred; want the buffer live, the caller's", st.Live, st.Deferred)
	}
	ok(t, "Free", r.pool.Free(b))
	release()
	ok(t, "MemFree", r.dev.MemFree(d))
	r.finish()
}

// faultKernel leaves the context's sticky error: a gather kernel, on a stream of its own, whose
// job reads host memory the device cannot reach into device memory dst. It returns what gives
// back the kernel's batcher and host memory, once the test has cleared the error.
func (r *asyncRig) faultKernel(dst cuda.DevicePtr) (release func()) {
	r.t.Helper()
	// Pageable memory, which no kernel reaches (the fake's devices answer PAGEABLE_MEMORY_ACCESS
	// 0; cuMemHostAlloc memory, mapped for every device whatever its flags, a kernel reaches).
	buf, err := unix.Mmap(-1, 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	ok(r.t, "mmap", err)
	unmapped := mem.Addr(buf)
	kb, err := copyengine.New(public(r.dev), copyengine.Options{Method: copyengine.MethodKernel})
	ok(r.t, "copyengine.New", err)
	side := r.stream()
	job := copyengine.Job{Dst: pubcuda.DevicePtr(dst), Src: pubcuda.DevicePtr(unmapped), Len: 64}
	ok(r.t, "Copy of a job that faults", kb.Copy([]copyengine.Job{job}, pubcuda.Stream(side)))
	if err := r.dev.StreamSynchronize(side); err == nil || r.f.StickyError() == 0 {
		r.t.Fatalf("the faulting kernel left no sticky error: %v", err)
	}
	return func() {
		ok(r.t, "Batcher Close", kb.Close())
		ok(r.t, "munmap", unix.Munmap(buf))
	}
}
