package fakecuda

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestStickyWaitOnFaultedEvent: a stream of device 1 asked to wait on an event of device 0's
// context after that context faulted is refused with the fault, as a query or synchronize of
// the event is (the fake's rule: a call that waits for another device's event answers that
// context's sticky error; UNMEASURED with two GPUs), rather than waiting on work that will
// never run; device 1 itself goes on working.
func TestStickyWaitOnFaultedEvent(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d0, d1 := f.Open(t, 0), f.Open(t, 1)
	t.Cleanup(f.ClearStickyError) // before the devices close
	s1, err := d1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	defer func() { must(t, "StreamDestroy on device 1", d1.StreamDestroy(s1)) }()
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
	must(t, "EventRecord on device 0 behind the kernel", d0.EventRecord(ev0, s0))
	wantCode(t, "StreamSynchronize of the faulting kernel", d0.StreamSynchronize(s0),
		ResultIllegalAddress)
	runtime.KeepAlive(pageable)

	wantCode(t, "device 1's EventQuery of device 0's event", d1.EventQuery(ev0),
		ResultIllegalAddress)
	wantCode(t, "device 1's StreamWaitEvent on device 0's event", d1.StreamWaitEvent(s1, ev0),
		ResultIllegalAddress)
	must(t, "device 1's StreamSynchronize", d1.StreamSynchronize(s1))
	must(t, "device 1's Synchronize", d1.Synchronize())
}
