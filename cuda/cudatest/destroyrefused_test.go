package cudatest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
)

// The give-backs FailNext can refuse since the fake could (StreamDestroy, EventDestroy,
// ModuleUnload, MemFree, MemAddressFree): each test checks what FailNext's documentation says
// the public packages do. The cleanup of cudatest.Device checks that nothing is left live.

// refusedWith fails the test unless err is the driver's refusal with code, said once.
func refusedWith(t *testing.T, what string, err error, code int, sentinel error) {
	t.Helper()
	got, ok := cuda.ResultCode(err)
	if !ok || got != code || !errors.Is(err, sentinel) {
		t.Fatalf("%s: %v (code %d); want the driver's refusal, code %d", what, err, got, code)
	}
	if n := strings.Count(err.Error(), "cuda:"); n != 1 {
		t.Errorf("%s: %q says \"cuda:\" %d times, want once", what, err, n)
	}
}

// TestFailNextStreamEventDestroy: a StreamDestroy or EventDestroy the driver refuses returns
// the refusal and leaves the handle alive and usable; the next call destroys it.
func TestFailNextStreamEventDestroy(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := dev.EventCreate()
	if err != nil {
		t.Fatal(err)
	}
	fake.FailNext(cudatest.StreamDestroy, cudatest.InvalidHandle)
	refusedWith(t, "StreamDestroy refused", dev.StreamDestroy(s), cudatest.InvalidHandle,
		cuda.ErrInvalidHandle)
	fake.FailNext(cudatest.EventDestroy, cudatest.InvalidHandle)
	refusedWith(t, "EventDestroy refused", dev.EventDestroy(ev), cudatest.InvalidHandle,
		cuda.ErrInvalidHandle)
	if err := errors.Join(dev.EventRecord(ev, s), dev.StreamSynchronize(s),
		dev.EventQuery(ev)); err != nil {
		t.Fatalf("the stream and event whose destroys were refused: %v; want them usable", err)
	}
	if err := errors.Join(dev.EventDestroy(ev), dev.StreamDestroy(s)); err != nil {
		t.Fatalf("the next destroys: %v", err)
	}
	if err := dev.StreamQuery(s); !errors.Is(err, cuda.ErrInvalidHandle) {
		t.Errorf("StreamQuery of the stream destroyed at last: %v, want ErrInvalidHandle", err)
	}
}

// TestFailNextHeapAddressFree: a device heap's Close whose cuMemAddressFree the driver refuses
// returns the refusal and keeps the range; the next Close frees it.
func TestFailNextHeapAddressFree(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Alloc(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	fake.FailNext(cudatest.MemAddressFree, cudatest.InvalidValue)
	refusedWith(t, "heap Close with its cuMemAddressFree refused", h.Close(),
		cudatest.InvalidValue, cuda.ErrInvalidValue)
	if used := fake.Used(); used != 0 {
		t.Errorf("Used after the refused Close = %d, want 0 (the memory released, the range kept)", used)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("the next Close: %v; want nil, the range freed", err)
	}
	if err := h.Close(); !errors.Is(err, device.ErrClosed) {
		t.Errorf("a Close after that: %v, want ErrClosed", err)
	}
}

// TestFailNextBatcherClose: a copyengine.Batcher's Close whose destroys of its stream and of
// an event, and whose unload of its kernel, the driver refuses returns the refusals and keeps
// what they name; the next Close gives each back.
func TestFailNextBatcherClose(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h := newHeap(t, dev, 8<<20)
	b, err := copyengine.New(dev, copyengine.Options{Method: copyengine.MethodKernel,
		LowPriority: true})
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Alloc(8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free(p)
	if err := errors.Join(b.Copy([]copyengine.Job{{Dst: p, Src: p + 4096, Len: 4096}}, 0),
		dev.Synchronize()); err != nil {
		t.Fatal(err)
	}
	fake.FailNext(cudatest.StreamDestroy, cudatest.InvalidHandle)
	fake.FailNext(cudatest.EventDestroy, cudatest.InvalidHandle)
	fake.FailNext(cudatest.ModuleUnload, cudatest.InvalidHandle)
	err = b.Close()
	if !errors.Is(err, cuda.ErrInvalidHandle) ||
		strings.Count(err.Error(), "CUDA_ERROR_INVALID_HANDLE") != 3 {
		t.Fatalf("Close with three refusals: %v; want each said", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("the next Close: %v; want nil, what the first kept given back", err)
	}
}

// TestFailNextCalibrationMemFree: a Batcher whose calibration's cuMemFree the driver refuses
// says so through Calibration, keeps the buffer, and frees it at Close.
func TestFailNextCalibrationMemFree(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	used := fake.Used()
	fake.FailNext(cudatest.MemFree, cudatest.InvalidValue)
	b, err := copyengine.New(dev, copyengine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Calibration(); !errors.Is(err, cuda.ErrInvalidValue) {
		t.Errorf("Calibration whose buffer's free was refused: %v, want the refusal", err)
	}
	if fake.Used() == used {
		t.Errorf("Used = %d after the refused free, as before: the buffer is not kept", used)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fake.Used(); got != used {
		t.Errorf("Used after Close = %d, want %d: the calibration's buffer leaked", got, used)
	}
}

// heapWithEvents makes a device heap whose event pool holds an idle event: a block of stream a
// freed on the legacy stream waits for a point recorded there, which the next Alloc takes.
func heapWithEvents(t *testing.T, dev *cuda.Device) *device.Heap {
	t.Helper()
	h, err := device.New(dev, device.Options{Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	a, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	p, err := h.Alloc(4096, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.FreeAsync(p, 0); err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(4096, a) // polls the deferred free: records a point
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(dev.Synchronize(), h.Free(q), h.ForgetStream(a),
		dev.StreamDestroy(a)); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestFailNextHeapEventDestroy: a device heap's Close whose destroy of one of its events the
// driver refuses returns the refusal; the next Close destroys the event, and the one after it
// says the heap is closed.
func TestFailNextHeapEventDestroy(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h := heapWithEvents(t, dev)
	fake.FailNext(cudatest.EventDestroy, cudatest.InvalidHandle)
	refusedWith(t, "heap Close with an event's destroy refused", h.Close(), cudatest.InvalidHandle,
		cuda.ErrInvalidHandle)
	if err := h.Close(); err != nil {
		t.Fatalf("the next Close: %v; want nil, the kept event destroyed", err)
	}
	if err := h.Close(); !errors.Is(err, device.ErrClosed) {
		t.Errorf("a Close after that: %v, want ErrClosed", err)
	}
}
