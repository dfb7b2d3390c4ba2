package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestCloseKeepsStreamsTheDriverRefused: a Close after the device faulted, with no memory
// held back (every block freed and its transfers done), on a device heap, host pool and mover
// the tier was given, meets the driver refusing to destroy the tier's streams and events (the
// context's sticky error refuses every call). It says so once, with uvm.ErrDeviceFault, and
// keeps them, with the shared heap's memory for the tier's stream, for a later Close, which
// destroys each once. Before, Close joined the same refusal ten times without the sentinel,
// forgot the streams and events it could not destroy (left to the end of the process), and a
// later Close, once the driver worked again, answered ErrClosed.
func TestCloseKeepsStreamsTheDriverRefused(t *testing.T) { closeAfterFault(t, true) }

// TestCloseKeepsStreamsTheDriverRefusedUnused is TestCloseKeepsStreamsTheDriverRefused for a
// tier that never used the device heap: the heap forgets its stream without a wait, and the
// refusals met are the driver's destroys of the tier's streams and events.
func TestCloseKeepsStreamsTheDriverRefusedUnused(t *testing.T) { closeAfterFault(t, false) }

func closeAfterFault(t *testing.T, used bool) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20, PurgeDelay: -1, Shards: 1})
	must(t, err)
	t.Cleanup(func() { must(t, pool.Close()) }) // after the tier's Close, registered later
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256})
	must(t, err)
	t.Cleanup(func() {
		if err := h.Close(); err != nil && !errors.Is(err, device.ErrClosed) {
			t.Errorf("the device heap's Close: %v", err)
		}
	})
	m := kernelMover(t, dev)
	before := f.LiveObjects()
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostPool: pool, Heap: h, Mover: m})
	s := stream(t, dev)
	if used {
		hs := filled(t, tr, 2, 64*kib)
		acquireAll(t, tr, s, uvm.Read, hs)
		for _, x := range hs {
			must(t, tr.Free(x))
		}
		must(t, tr.Sync())
	}
	open := f.LiveObjects()
	f.Fault(t, dev)
	faulted := f.LiveObjects() // and the faulting kernel's

	err = tr.Close()
	if !errors.Is(err, uvm.ErrDeviceFault) || !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Errorf("Close after a fault: %v; want uvm.ErrDeviceFault", err)
	}
	if code, _ := pcuda.ResultCode(err); code != fakecuda.ResultIllegalAddress {
		t.Errorf("Close after a fault: %v; want the driver's CUDA_ERROR_ILLEGAL_ADDRESS in the chain", err)
	}
	if err != nil {
		seen := map[string]bool{}
		for _, line := range strings.Split(err.Error(), "\n") {
			if seen[line] {
				t.Errorf("Close after a fault says %q more than once: %v", line, err)
				break
			}
			seen[line] = true
		}
		if n := strings.Count(err.Error(), uvm.ErrDeviceFault.Error()); n != 1 {
			t.Errorf("Close after a fault: %v; want the device's failure said once", err)
		}
	}
	if v := f.LiveObjects()["streams"]; v != open["streams"] {
		t.Errorf("%d streams after the refused Close, want the %d before it: the tier keeps its own", v, open["streams"])
	}
	if tr.Stats().Released {
		t.Error("Stats.Released after a Close that kept the tier's streams")
	}

	f.ClearStickyError()
	if err := tr.Close(); err != nil {
		t.Fatalf("Close once the driver works again: %v; want nil: it destroys what the first kept", err)
	}
	if v := f.LiveObjects()["streams"]; v != before["streams"]+1 { // s, the test's
		t.Errorf("%d streams after the second Close, want %d: the tier's two destroyed", v, before["streams"]+1)
	}
	must(t, h.Close()) // its events for the tier's stream go with it
	if v, want := f.LiveObjects()["events"], before["events"]+faulted["events"]-open["events"]; v != want {
		t.Errorf("%d events after the second Close and the heap's, want %d: the tier's all destroyed", v, want)
	}
	if err := tr.Close(); !errors.Is(err, uvm.ErrClosed) {
		t.Errorf("third Close: %v, want ErrClosed", err)
	}
	if !tr.Stats().Released {
		t.Error("Stats.Released false after the Close that gave everything back")
	}
}
