package fakecuda

import (
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// TestFreeRules: cuMemFree, cuMemFreeAsync and cuMemFreeHost take the pointer their allocation
// returned and nothing else: an interior pointer is refused (CUDA_ERROR_INVALID_VALUE) and
// frees nothing, and so is a second free (D: cuMemFree's dptr "must have been returned by a
// previous call to cuMemAlloc", cuMemFreeHost's p by cuMemAllocHost or cuMemHostAlloc;
// cudaFree: "Otherwise, or if cudaFree(devPtr) has already been called before, an error is
// returned"). The allocation an interior free was refused for is still there: its base frees.
func TestFreeRules(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	p, err := d.MemAlloc(1 << 20)
	must(t, "MemAlloc", err)
	wantErr(t, "MemFree of an interior pointer", d.MemFree(p+4096), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemFreeAsync of an interior pointer", d.MemFreeAsync(p+4096, 0), pinmalloc.ErrInvalidValue)
	must(t, "MemFree", d.MemFree(p))
	wantErr(t, "MemFree twice", d.MemFree(p), pinmalloc.ErrInvalidValue)
	wantErr(t, "MemFreeAsync after MemFree", d.MemFreeAsync(p, 0), pinmalloc.ErrInvalidValue)

	a, err := d.MemAllocAsync(4096, 0)
	must(t, "MemAllocAsync", err)
	wantErr(t, "MemFreeAsync of an interior pointer", d.MemFreeAsync(a+512, 0), pinmalloc.ErrInvalidValue)
	must(t, "MemFreeAsync", d.MemFreeAsync(a, 0))
	wantErr(t, "MemFreeAsync twice", d.MemFreeAsync(a, 0), pinmalloc.ErrInvalidValue)
	must(t, "Synchronize", d.Synchronize())

	h, err := d.MemHostAlloc(1<<16, 0)
	must(t, "MemHostAlloc", err)
	wantErr(t, "MemFreeHost of an interior pointer", d.MemFreeHost(h+4096), pinmalloc.ErrInvalidValue)
	must(t, "MemFreeHost", d.MemFreeHost(h))
	wantErr(t, "MemFreeHost twice", d.MemFreeHost(h), pinmalloc.ErrInvalidValue)
	if n := f.Stat(DeviceAllocs); n != 0 {
		t.Errorf("%d device allocations left", n)
	}
}

// TestDestroyedEventRefused: an event destroyed is refused by every call that takes it
// (CUDA_ERROR_INVALID_HANDLE): record, wait, query, synchronize, elapsed time and a second
// destroy. D: cuEventDestroy, "use of the handle after this call is undefined behavior";
// refusing is the stricter choice, as for a destroyed stream (TestAsyncDestroyedStream).
func TestDestroyedEventRefused(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	live, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(live)) }()
	must(t, "EventRecord", d.EventRecord(live, s))
	ev, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	must(t, "EventRecord", d.EventRecord(ev, s))
	must(t, "EventDestroy", d.EventDestroy(ev))
	wantErr(t, "EventRecord of a destroyed event", d.EventRecord(ev, s), pinmalloc.ErrInvalidHandle)
	wantErr(t, "StreamWaitEvent on a destroyed event", d.StreamWaitEvent(s, ev), pinmalloc.ErrInvalidHandle)
	wantErr(t, "EventQuery of a destroyed event", d.EventQuery(ev), pinmalloc.ErrInvalidHandle)
	wantErr(t, "EventSynchronize of a destroyed event", d.EventSynchronize(ev), pinmalloc.ErrInvalidHandle)
	_, err = d.EventElapsed(live, ev)
	wantErr(t, "EventElapsed with a destroyed event", err, pinmalloc.ErrInvalidHandle)
	wantErr(t, "EventDestroy twice", d.EventDestroy(ev), pinmalloc.ErrInvalidHandle)
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
}
