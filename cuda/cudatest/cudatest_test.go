package cudatest_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
)

// newHeap makes a device heap of capacity bytes on dev, closed at t's cleanup (before the
// device is checked and closed: cleanups run last first).
func newHeap(t *testing.T, dev *cuda.Device, capacity uintptr) *device.Heap {
	t.Helper()
	h, err := device.New(dev, device.Options{Capacity: int(capacity)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// TestDevice: the device is the fake's, and bytes go to it and come back.
func TestDevice(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	if !cudatest.IsFake(dev) || fake == nil {
		t.Fatalf("IsFake = false or no controls on the fake driver")
	}
	h := newHeap(t, dev, 8<<20)
	p, err := h.Alloc(1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte("cudatest"), 1<<17)
	dst := make([]byte, len(src))
	if err := errors.Join(h.HtoD(p, src), h.DtoH(dst, p)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		t.Error("the bytes read back differ from those written")
	}
	if fake.Used() < 1<<20 {
		t.Errorf("Used = %d with a 1 MiB block live; want at least 1 MiB", fake.Used())
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
}

// TestHold: held work stays pending, and a stream query says so, until CompleteStream.
func TestHold(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h := newHeap(t, dev, 8<<20)
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(s)
	defer h.ForgetStream(s)
	p, err := h.Alloc(4096, s)
	if err != nil {
		t.Fatal(err)
	}
	fake.Hold(true)
	if err := h.MemsetAsync(p, 7, 4096, s); err != nil {
		t.Fatal(err)
	}
	if err := dev.StreamQuery(s); !errors.Is(err, cuda.ErrNotReady) {
		t.Fatalf("StreamQuery with the memset held = %v; want cuda.ErrNotReady", err)
	}
	if fake.Pending() != 1 {
		t.Errorf("Pending = %d; want 1", fake.Pending())
	}
	fake.CompleteStream(s)
	if err := dev.StreamQuery(s); err != nil || fake.Pending() != 0 {
		t.Fatalf("after CompleteStream: StreamQuery = %v, Pending = %d; want nil, 0", err, fake.Pending())
	}
	got := make([]byte, 4096)
	if err := h.DtoH(got, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{7}, 4096)) {
		t.Error("the memset did not run")
	}
	if err := h.FreeAsync(p, s); err != nil {
		t.Fatal(err)
	}
	fake.Complete()
}

// TestSetMemory: a device shrunk to 16 MiB says so and refuses a heap's growth beyond it.
func TestSetMemory(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	fake.SetMemory(16 << 20)
	if total, err := dev.TotalMem(); err != nil || total != 16<<20 {
		t.Fatalf("TotalMem = %d, %v; want 16 MiB", total, err)
	}
	h := newHeap(t, dev, 64<<20)
	p, err := h.Alloc(12<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Alloc(8<<20, 0); !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Errorf("Alloc of 8 MiB more on a 16 MiB device = %v; want cuda.ErrOutOfMemory", err)
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
}

// TestFailNext: the next kernel launch fails with the code asked for, once: a batch of copies
// moved by copyengine.Batcher's gather kernel fails, and the next one works.
func TestFailNext(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h := newHeap(t, dev, 8<<20)
	b, err := copyengine.New(dev, copyengine.Options{Method: copyengine.MethodKernel})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p, err := h.Alloc(8192, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free(p)
	jobs := []copyengine.Job{{Dst: p, Src: p + 4096, Len: 4096}}
	fake.FailNext(cudatest.LaunchKernel, cudatest.LaunchFailed)
	err = b.Copy(jobs, 0)
	if code, ok := cuda.ResultCode(err); !ok || code != cudatest.LaunchFailed {
		t.Fatalf("Copy after FailNext(LaunchKernel, LaunchFailed) = %v (code %d); want code %d", err, code, cudatest.LaunchFailed)
	}
	if err := errors.Join(b.Copy(jobs, 0), dev.Synchronize()); err != nil {
		t.Fatalf("the next Copy: %v; FailNext fails one call", err)
	}
}

// TestFailNextEventRecord: the next cuEventRecord fails with the code asked for, once, and
// leaves the event as it was, as the driver queues nothing for a call that fails: an event
// never recorded stays complete, one recorded behind held work still stands for that record.
// A device heap whose point for a deferred free cannot be recorded answers with a synchronize
// of the context: the free is done, nothing is lost.
func TestFailNextEventRecord(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h := newHeap(t, dev, 8<<20)
	a, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(a)
	defer h.ForgetStream(a)
	ev, err := dev.EventCreate()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.EventDestroy(ev)
	wantFail := func(what string, err error) {
		t.Helper()
		if code, ok := cuda.ResultCode(err); !ok || code != cudatest.InvalidValue || !errors.Is(err, cuda.ErrInvalidValue) {
			t.Fatalf("%s after FailNext(EventRecord, InvalidValue) = %v (code %d); want code %d", what, err, code, cudatest.InvalidValue)
		}
	}

	fake.FailNext(cudatest.EventRecord, cudatest.InvalidValue)
	wantFail("EventRecord of a new event", dev.EventRecord(ev, a))
	if err := dev.EventQuery(ev); err != nil {
		t.Fatalf("a never-recorded event after a failed record: %v; want complete", err)
	}

	fake.Hold(true)
	defer fake.Complete()
	p, err := h.Alloc(4096, a)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.HtoDAsync(p, make([]byte, 4096), a); err != nil {
		t.Fatal(err)
	}
	if err := dev.EventRecord(ev, a); err != nil { // behind the held copy
		t.Fatal(err)
	}
	fake.FailNext(cudatest.EventRecord, cudatest.InvalidValue)
	wantFail("EventRecord on the idle legacy stream", dev.EventRecord(ev, 0))
	if err := dev.EventQuery(ev); !errors.Is(err, cuda.ErrNotReady) {
		t.Fatalf("an event recorded behind held work, then a failed record: %v; want ErrNotReady (the earlier record stands)", err)
	}

	// The heap: a's block freed on the legacy stream waits for a point there; its record fails.
	if err := h.FreeAsync(p, 0); err != nil {
		t.Fatal(err)
	}
	fake.FailNext(cudatest.EventRecord, cudatest.InvalidValue)
	q, err := h.Alloc(4096, a) // polls the deferred free: the record fails, the context is synchronized
	if err != nil {
		t.Fatalf("Alloc whose poll's record fails: %v", err)
	}
	if st := h.Stats(); st.Frees != 1 || fake.Pending() != 0 {
		t.Fatalf("after the failed record: %d frees done, %d streams with work pending; want 1, none", st.Frees, fake.Pending())
	}
	if err := dev.EventQuery(ev); err != nil {
		t.Fatalf("the event after the context's synchronize: %v", err)
	}
	if err := errors.Join(dev.EventRecord(ev, a), h.Free(q)); err != nil {
		t.Fatalf("the next record: %v; FailNext fails one call", err)
	}
}

// TestFailNextGiveBack: a device heap's Trim whose cuMemUnmap or cuMemRelease the driver
// refuses leaves the memory mapped and the heap's: the next block there takes bytes and gives
// them back, and the next Trim gives the memory back.
func TestFailNextGiveBack(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	for _, c := range []struct {
		name string
		call cudatest.Call
	}{{"MemUnmap", cudatest.MemUnmap}, {"MemRelease", cudatest.MemRelease}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHeap(t, dev, 8<<20)
			const n = 1 << 20
			p, err := h.Alloc(n, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Free(p); err != nil {
				t.Fatal(err)
			}
			used := fake.Used()
			fake.FailNext(c.call, cudatest.NotPermitted)
			_ = h.Trim() // refused: the memory stays
			if got := fake.Used(); got != used {
				t.Fatalf("Used after a refused give-back = %d, want %d (the memory kept)", got, used)
			}
			q, err := h.Alloc(n, 0)
			if err != nil {
				t.Fatal(err)
			}
			src := bytes.Repeat([]byte("give back"), n/9+1)[:n]
			dst := make([]byte, n)
			if err := errors.Join(h.HtoD(q, src), h.DtoH(dst, q)); err != nil {
				t.Fatalf("a block where the give-back was refused: %v", err)
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("a block where the give-back was refused lost its bytes")
			}
			if err := h.Free(q); err != nil {
				t.Fatal(err)
			}
			if err := h.Trim(); err != nil {
				t.Fatal(err)
			}
			if got := fake.Used(); got >= used {
				t.Fatalf("Used after the next Trim = %d, want less than %d", got, used)
			}
		})
	}
}
