package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFailAfterGiveBack: FailAfter makes cuStreamDestroy, cuEventDestroy, cuModuleUnload,
// cuMemFree and cuMemAddressFree fail, each once, after the calls skipped; a refused one
// leaves what it names alive and usable, as the real driver does when it refuses, and the same
// call again gives it back.
func TestFailAfterGiveBack(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	p, err := d.MemAlloc(1 << 20)
	must(t, "MemAlloc", err)
	must(t, "MemsetD8Async", d.MemsetD8Async(p, 7, 1<<20, s))
	streams := f.Stat(Streams)
	f.FailAfter(CallStreamDestroy, 0, ResultInvalidHandle)
	wantCode(t, "StreamDestroy", d.StreamDestroy(s), ResultInvalidHandle)
	if n := f.Stat(Streams); n != streams {
		t.Errorf("%d streams after a refused cuStreamDestroy, want %d", n, streams)
	}
	must(t, "MemsetD8Async on the stream a refused destroy left", d.MemsetD8Async(p, 9, 1<<20, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	must(t, "StreamDestroy again", d.StreamDestroy(s))

	e1, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	e2, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	must(t, "EventRecord", d.EventRecord(e2, 0))
	f.FailAfter(CallEventDestroy, 1, ResultInvalidValue)
	must(t, "first EventDestroy", d.EventDestroy(e1))
	events := f.Stat(Events)
	wantCode(t, "second EventDestroy", d.EventDestroy(e2), ResultInvalidValue)
	if n := f.Stat(Events); n != events {
		t.Errorf("%d events after a refused cuEventDestroy, want %d", n, events)
	}
	must(t, "EventQuery of the event a refused destroy left", d.EventQuery(e2))
	must(t, "EventRecord of it", d.EventRecord(e2, 0))
	must(t, "EventDestroy again", d.EventDestroy(e2))

	m, err := d.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	modules := f.Modules()
	f.FailAfter(CallModuleUnload, 0, ResultInvalidHandle)
	wantCode(t, "ModuleUnload", d.ModuleUnload(m), ResultInvalidHandle)
	if n := f.Modules(); n != modules {
		t.Errorf("%d modules after a refused cuModuleUnload, want %d", n, modules)
	}
	_, err = d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction of the module a refused unload left", err)
	must(t, "ModuleUnload again", d.ModuleUnload(m))

	used := f.Used(0)
	f.FailAfter(CallMemFree, 0, ResultInvalidValue)
	wantCode(t, "MemFree", d.MemFree(p), ResultInvalidValue)
	if u := f.Used(0); u != used || f.Stat(DeviceAllocs) != 1 {
		t.Errorf("after a refused cuMemFree: %d bytes used (want %d), %d device allocations (want 1)",
			u, used, f.Stat(DeviceAllocs))
	}
	b := make([]byte, 1<<20)
	must(t, "MemcpyDtoH from the memory a refused free left", d.MemcpyDtoH(mem.Addr(b), p, 1<<20))
	if b[0] != 9 || b[len(b)-1] != 9 {
		t.Errorf("the memory a refused free left reads %d, %d; want 9, 9", b[0], b[len(b)-1])
	}
	must(t, "MemFree again", d.MemFree(p))

	va, err := d.MemAddressReserve(2*gran, 0)
	must(t, "MemAddressReserve", err)
	f.FailAfter(CallAddressFree, 0, ResultInvalidValue)
	wantCode(t, "MemAddressFree", d.MemAddressFree(va, 2*gran), ResultInvalidValue)
	if n := f.Stat(Reservations); n != 1 {
		t.Errorf("%d reservations after a refused cuMemAddressFree, want 1", n)
	}
	h, err := f.MemCreate(d, gran, cuda.MemLocation{Type: locDevice}, 0)
	must(t, "MemCreate", err)
	must(t, "MemMap into the reservation a refused free left", d.MemMap(va, gran, h))
	must(t, "MemUnmap", d.MemUnmap(va, gran))
	must(t, "MemRelease", f.MemRelease(d, h))
	must(t, "MemAddressFree again", d.MemAddressFree(va, 2*gran))
}

// TestFailAfterGiveBackUnderSticky: with no injection, a context's sticky error refuses every
// call that gives back (as a real driver's does), and the refusal leaves each object alive: once
// the error is cleared (which only the fake can do), each is given back once.
func TestFailAfterGiveBackUnderSticky(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	m, err := d.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	p, err := d.MemAlloc(4096)
	must(t, "MemAlloc", err)
	va, err := d.MemAddressReserve(gran, 0)
	must(t, "MemAddressReserve", err)
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	pageable := make([]uint64, 8) // a job array the device cannot reach: the kernel faults
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	must(t, "LaunchKernel", d.LaunchKernel(fn, one, one, 0, s, uint64(mem.WordsAddr(pageable)), 1))
	err = d.StreamSynchronize(s)
	wantCode(t, "StreamSynchronize of the faulting kernel", err, ResultIllegalAddress)
	runtime.KeepAlive(pageable)
	t.Cleanup(f.ClearStickyError) // where the test fails before it clears the error
	wantCode(t, "StreamDestroy", d.StreamDestroy(s), ResultIllegalAddress)
	wantCode(t, "EventDestroy", d.EventDestroy(ev), ResultIllegalAddress)
	wantCode(t, "ModuleUnload", d.ModuleUnload(m), ResultIllegalAddress)
	wantCode(t, "MemFree", d.MemFree(p), ResultIllegalAddress)
	wantCode(t, "MemAddressFree", d.MemAddressFree(va, gran), ResultIllegalAddress)
	if f.Stat(Streams) != 1 || f.Stat(Events) != 1 || f.Modules() != 1 || f.Stat(DeviceAllocs) != 1 ||
		f.Stat(Reservations) != 1 {
		t.Errorf("after the refusals: %v, %d modules", f.LiveObjects(), f.Modules())
	}
	f.ClearStickyError()
	must(t, "StreamDestroy", d.StreamDestroy(s))
	must(t, "EventDestroy", d.EventDestroy(ev))
	must(t, "ModuleUnload", d.ModuleUnload(m))
	must(t, "MemFree", d.MemFree(p))
	must(t, "MemAddressFree", d.MemAddressFree(va, gran))
}
