package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestCloseKeepsRefusedHandles: a Close whose destroy of one of the tier's streams and of one
// of its events the driver refuses (INVALID_HANDLE: FailAfter, no sticky error) says the
// refusal once, without ErrDeviceFault, keeps that stream and that event, and a later Close
// destroys each once; nothing else is destroyed twice.
func TestCloseKeepsRefusedHandles(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20,
		PurgeDelay: -1, Shards: 1})
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
	hs := filled(t, tr, 2, 64*kib)
	acquireAll(t, tr, s, uvm.Read, hs)
	for _, x := range hs {
		must(t, tr.Free(x))
	}
	must(t, tr.Sync())
	open := f.LiveObjects()
	if open["events"] <= before["events"] {
		t.Fatalf("the tier made no events (%d live before it, %d now)", before["events"],
			open["events"])
	}

	f.FailAfter(fakecuda.CallStreamDestroy, 1, fakecuda.ResultInvalidHandle) // the second's
	f.FailAfter(fakecuda.CallEventDestroy, 0, fakecuda.ResultInvalidHandle)  // the first's
	err = tr.Close()
	if !errors.Is(err, pinmalloc.ErrInvalidHandle) || errors.Is(err, pinmalloc.ErrDeviceFault) ||
		errors.Is(err, uvm.ErrDeviceFault) {
		t.Errorf("Close with a stream's and an event's destroy refused: %v; want "+
			"ErrInvalidHandle, not ErrDeviceFault", err)
	}
	if err != nil {
		if n := strings.Count(err.Error(), "INVALID_HANDLE"); n != 1 {
			t.Errorf("Close says the refusal %d times, want once: %v", n, err)
		}
		if !strings.Contains(err.Error(), "1 stream and 1 event") {
			t.Errorf("Close: %v; want it to say it keeps 1 stream and 1 event", err)
		}
	}
	if tr.Stats().Released {
		t.Error("Stats.Released after a Close that kept a stream and an event")
	}
	kept := f.LiveObjects()
	if v := kept["streams"]; v != before["streams"]+2 { // s, the test's, and the one kept
		t.Errorf("%d streams after the refused Close, want %d", v, before["streams"]+2)
	}

	if err := tr.Close(); err != nil {
		t.Fatalf("Close again: %v; want nil: it destroys what the first kept", err)
	}
	again := f.LiveObjects()
	if kept["streams"]-again["streams"] != 1 || kept["events"]-again["events"] != 1 {
		t.Errorf("the second Close destroyed %d streams and %d events, want 1 and 1",
			kept["streams"]-again["streams"], kept["events"]-again["events"])
	}
	if !tr.Stats().Released {
		t.Error("Stats.Released false after the Close that gave everything back")
	}
	if err := tr.Close(); !errors.Is(err, uvm.ErrClosed) {
		t.Errorf("third Close: %v, want ErrClosed", err)
	}
	must(t, h.Close()) // its events for the tier's stream go with it
	if v := f.LiveObjects()["events"]; v != before["events"] {
		t.Errorf("%d events after the tier's Close and the heap's, want the %d before the tier",
			v, before["events"])
	}
}
