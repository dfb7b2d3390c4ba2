package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestStickyWorkOnFaultedStream: work queued from device 1's healthy context onto a stream of
// device 0's faulted context (an event record, async copies and memsets, a batch, a wait, a
// stream-ordered allocation and free) is refused with device 0's sticky error: the CUresult
// docs say of a fault that "any further CUDA work will return the same error", and a
// stream's work runs in its own context, where it would never run. Device 1's own streams go on
// working.
func TestStickyWorkOnFaultedStream(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d0, d1 := f.Open(t, 0), f.Open(t, 1)
	t.Cleanup(f.ClearStickyError) // before the devices close
	const n = 4096
	s1, err := d1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	ev1, err := d1.EventCreate(true)
	must(t, "EventCreate on device 1", err)
	p1, err := d1.MemAlloc(2 * n)
	must(t, "MemAlloc on device 1", err)
	h1, err := d1.MemHostAlloc(n, 0)
	must(t, "MemHostAlloc on device 1", err)
	defer func() {
		must(t, "MemFreeHost on device 1", d1.MemFreeHost(h1))
		must(t, "MemFree on device 1", d1.MemFree(p1))
		must(t, "EventDestroy on device 1", d1.EventDestroy(ev1))
		must(t, "StreamDestroy on device 1", d1.StreamDestroy(s1))
	}()
	s0, err := d0.StreamCreate(true)
	must(t, "StreamCreate on device 0", err)
	ev0, err := d0.EventCreate(true)
	must(t, "EventCreate on device 0", err)
	m, err := d0.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	defer func() {
		f.ClearStickyError()
		must(t, "EventDestroy on device 0", d0.EventDestroy(ev0))
		must(t, "StreamDestroy on device 0", d0.StreamDestroy(s0))
		must(t, "ModuleUnload", d0.ModuleUnload(m))
	}()
	fn, err := d0.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)

	// Device 0's kernel reads a job array the device cannot reach: it faults when it runs.
	pageable := make([]uint64, 8) // aligned: the job array must be
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	err = d0.LaunchKernel(fn, one, one, 0, s0, uint64(mem.WordsAddr(pageable)), 1)
	must(t, "LaunchKernel on device 0", err)
	wantCode(t, "StreamSynchronize of the faulting kernel", d0.StreamSynchronize(s0),
		ResultIllegalAddress)
	runtime.KeepAlive(pageable)

	q1 := p1 + n
	must(t, "EventRecord on device 1", d1.EventRecord(ev1, s1))
	calls := []struct {
		what string
		err  error
	}{
		{"EventRecord of device 0's event", d1.EventRecord(ev0, s0)},
		{"MemsetD8Async", d1.MemsetD8Async(p1, 1, n, s0)},
		{"MemcpyHtoDAsync", d1.MemcpyHtoDAsync(p1, h1, n, s0)},
		{"MemcpyDtoHAsync", d1.MemcpyDtoHAsync(h1, p1, n, s0)},
		{"MemcpyDtoDAsync", d1.MemcpyDtoDAsync(q1, p1, n, s0)},
		{"MemcpyAsync", d1.MemcpyAsync(uintptr(q1), uintptr(p1), n, s0)},
		{"MemcpyBatchAsync", d1.MemcpyBatchAsync([]uintptr{uintptr(q1)}, []uintptr{uintptr(p1)},
			[]uintptr{n}, 0, s0)},
		{"StreamWaitEvent of device 1's event", d1.StreamWaitEvent(s0, ev1)},
	}
	for _, c := range calls {
		wantCode(t, "device 1's "+c.what+" on device 0's stream", c.err, ResultIllegalAddress)
	}
	a, err := d1.MemAllocAsync(n, s0)
	wantCode(t, "device 1's MemAllocAsync on device 0's stream", err, ResultIllegalAddress)
	if err == nil {
		_ = d1.MemFreeAsync(a, s1)
	}
	b, err := d1.MemAllocAsync(n, s1)
	must(t, "device 1's MemAllocAsync on its own stream", err)
	wantCode(t, "device 1's MemFreeAsync on device 0's stream", d1.MemFreeAsync(b, s0),
		ResultIllegalAddress)
	must(t, "device 1's MemFreeAsync on its own stream", d1.MemFreeAsync(b, s1))
	must(t, "device 1's MemsetD8Async on its own stream", d1.MemsetD8Async(p1, 2, n, s1))
	must(t, "device 1's StreamSynchronize", d1.StreamSynchronize(s1))
	must(t, "device 1's Synchronize", d1.Synchronize())
}
