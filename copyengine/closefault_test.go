package copyengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCloseAfterFaultKeepsWhatIsRefused: a Close after the device faulted (a kernel of the
// Batcher's own read memory the device cannot reach: the context's sticky error refuses every
// call from then on) says the fault once, with an error matching pinmalloc.ErrDeviceFault, and
// keeps its staging buffer, side stream, kernel and fence events, which the driver refused to
// give back; once the driver works again, the next Close gives each back once. Before, Close
// said the same error seven times, forgot the side stream, the module and the fence events
// (left to the context's destruction), and the next Close gave back only the staging buffer.
func TestCloseAfterFaultKeepsWhatIsRefused(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	host, d := hostMem(t, dev, n), devMem(t, dev, n)
	unmapped := pageableMem(t, n) // no kernel reaches it
	type counts struct{ streams, events, modules, hostAllocs int64 }
	count := func() counts {
		return counts{f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events), f.Modules(),
			f.Stat(fakecuda.HostAllocs)}
	}
	before := count()
	b, err := New(public(dev), Options{Method: MethodKernel, LowPriority: true})
	must(t, "New", err)
	must(t, "Copy", b.Copy([]Job{mkJob(d, host, n)}, 0))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0))
	must(t, "Copy of a job that faults", b.Copy([]Job{mkJob(d, unmapped, 64)}, 0))
	t.Cleanup(f.ClearStickyError) // before the cleanups above, where the test stops early
	if err := dev.StreamSynchronize(0); !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Fatalf("the faulting kernel: %v, want a device fault", err)
	}
	open := count()

	err = b.Close()
	t.Logf("Close after a fault: %v", err)
	if !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Errorf("Close after a fault: %v, want pinmalloc.ErrDeviceFault", err)
	}
	if err != nil {
		if k := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); k != 1 {
			t.Errorf("Close after a fault says the fault %d times: %v", k, err)
		}
	}
	if now := count(); now != open {
		t.Errorf("after the refused Close: %+v, want %+v: what the driver refused is kept", now, open)
	}

	f.ClearStickyError()
	must(t, "Close once the driver works again", b.Close())
	if now := count(); now != before {
		t.Errorf("after the second Close: %+v, want %+v: the Batcher's all given back", now, before)
	}
	must(t, "a third Close", b.Close())
	if err := b.Copy([]Job{mkJob(d, host, n)}, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Copy after Close: %v, want ErrClosed", err)
	}
}

// TestCloseKeepsRefusedDestroys: a Close whose destroys of the side stream and of a fence
// event, and whose unload of the kernel, the driver refuses (a bad handle) returns each refusal
// and keeps what it names; the next Close gives each back once and returns nil. Before, Close
// forgot the stream, the event and the module whatever the driver said, leaving them to the
// context's destruction.
func TestCloseKeepsRefusedDestroys(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	host, d := hostMem(t, dev, n), devMem(t, dev, n)
	streams, events, modules := f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events), f.Modules()
	b, err := New(public(dev), Options{Method: MethodKernel, LowPriority: true})
	must(t, "New", err)
	must(t, "Copy", b.Copy([]Job{mkJob(d, host, n)}, 0))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0))
	f.FailAfter(fakecuda.CallStreamDestroy, 0, fakecuda.ResultInvalidHandle)
	// The staging buffer's event is destroyed first, then the fence's: its destroy is refused.
	f.FailAfter(fakecuda.CallEventDestroy, 1, fakecuda.ResultInvalidHandle)
	f.FailAfter(fakecuda.CallModuleUnload, 0, fakecuda.ResultInvalidHandle)
	err = b.Close()
	if !errors.Is(err, pinmalloc.ErrInvalidHandle) ||
		strings.Count(err.Error(), "CUDA_ERROR_INVALID_HANDLE") != 3 {
		t.Errorf("Close with three refusals: %v, want each said", err)
	}
	s, e, m := f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events), f.Modules()
	if s != streams+1 || e != events+1 || m != modules+1 {
		t.Errorf("after the refused Close: %d streams, %d events, %d modules; want %d, %d, %d",
			s, e, m, streams+1, events+1, modules+1)
	}
	must(t, "Close again", b.Close())
	s, e, m = f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events), f.Modules()
	if s != streams || e != events || m != modules {
		t.Errorf("after the second Close: %d streams, %d events, %d modules; want %d, %d, %d",
			s, e, m, streams, events, modules)
	}
	must(t, "a third Close", b.Close())
}
