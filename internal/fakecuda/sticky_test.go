package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestStickyPerContext: a sticky fault (CUDA_ERROR_ILLEGAL_ADDRESS) is the faulting context's:
// device 0's kernel faults, and device 0's calls, streams and events answer with the fault
// from then on, while device 1's primary context goes on working (its copies, memsets,
// queries and synchronizes succeed, its bytes move). A faulted context refuses every call, a
// stream's destroy and a module's unload too.
func TestStickyPerContext(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d0, d1 := f.Open(t, 0), f.Open(t, 1)
	t.Cleanup(f.ClearStickyError) // before the devices close
	const n = 4096

	// Device 1's work, queued before the fault and pending through it.
	p1, err := d1.MemAlloc(n)
	must(t, "MemAlloc on device 1", err)
	defer func() { must(t, "MemFree on device 1", d1.MemFree(p1)) }()
	s1, err := d1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	defer func() { must(t, "StreamDestroy on device 1", d1.StreamDestroy(s1)) }()
	ev1, err := d1.EventCreate(false)
	must(t, "EventCreate on device 1", err)
	defer func() { must(t, "EventDestroy on device 1", d1.EventDestroy(ev1)) }()
	must(t, "MemsetD8Async on device 1", d1.MemsetD8Async(p1, 7, n, s1))
	must(t, "EventRecord on device 1", d1.EventRecord(ev1, s1))

	// Device 0's kernel reads a job array the device cannot reach: it faults when it runs.
	m, err := d0.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	fn, err := d0.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	s0, err := d0.StreamCreate(true)
	must(t, "StreamCreate on device 0", err)
	pageable := make([]uint64, 8) // aligned: the job array must be
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	err = d0.LaunchKernel(fn, one, one, 0, s0, uint64(mem.WordsAddr(pageable)), 1)
	must(t, "LaunchKernel on device 0", err)
	err = d0.StreamSynchronize(s0)
	wantCode(t, "StreamSynchronize of the faulting kernel", err, ResultIllegalAddress)
	runtime.KeepAlive(pageable)
	wantCode(t, "device 0's Synchronize after its fault", d0.Synchronize(), ResultIllegalAddress)
	err = d0.MemsetD8Async(p1, 0, n, s1)
	wantCode(t, "device 0's MemsetD8Async after its fault", err, ResultIllegalAddress)
	// Every call of the faulted context answers with its error, a release too: its stream
	// and module stay until the error is forgotten (the fake's stand-in for a new process).
	wantCode(t, "device 0's StreamDestroy after its fault", d0.StreamDestroy(s0), ResultIllegalAddress)
	wantCode(t, "device 0's ModuleUnload after its fault", d0.ModuleUnload(m), ResultIllegalAddress)
	_, err = d0.StreamCreate(true)
	wantCode(t, "device 0's StreamCreate after its fault", err, ResultIllegalAddress)
	defer func() {
		f.ClearStickyError()
		must(t, "StreamDestroy on device 0", d0.StreamDestroy(s0))
		must(t, "ModuleUnload", d0.ModuleUnload(m))
	}()

	// Device 1 is untouched.
	must(t, "device 1's EventQuery after device 0's fault", d1.EventQuery(ev1))
	must(t, "device 1's StreamQuery after device 0's fault", d1.StreamQuery(s1))
	must(t, "device 1's MemsetD8Async after device 0's fault", d1.MemsetD8Async(p1, 9, n/2, s1))
	must(t, "device 1's StreamSynchronize after device 0's fault", d1.StreamSynchronize(s1))
	must(t, "device 1's Synchronize after device 0's fault", d1.Synchronize())
	got := make([]byte, n)
	must(t, "device 1's MemcpyDtoH after device 0's fault", d1.MemcpyDtoH(mem.Addr(got), p1, n))
	if got[0] != 9 || got[n-1] != 7 {
		t.Errorf("device 1's memsets after device 0's fault: bytes %d, %d; want 9, 7",
			got[0], got[n-1])
	}
	s0e, s1e, anyErr := f.StickyErrorOf(0), f.StickyErrorOf(1), f.StickyError()
	if s0e != ResultIllegalAddress || s1e != 0 || anyErr != ResultIllegalAddress {
		t.Errorf("sticky errors: device 0 %d, device 1 %d, any %d; want %d, 0, %d",
			s0e, s1e, anyErr, ResultIllegalAddress, ResultIllegalAddress)
	}
}
