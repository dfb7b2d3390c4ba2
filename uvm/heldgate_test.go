package uvm_test

import (
	"errors"
	"testing"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestSyncHeldBackHoldsCaptureGate: memory held back by a Free after a fault is given back by
// a Sync after a synchronize of the device, made once the Sync has found that no capture holds
// a stream the tier knows, nor the legacy stream (retryHeld). A capture begun through package
// cuda on another thread between that look and the synchronize must wait for the Sync (the
// capture gate, icuda.HoldCaptureBegins). Before, the tier held no gate there: the capture, on
// a blocking stream, began in between, and the synchronize of the device invalidated it.
func TestSyncHeldBackHoldsCaptureGate(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr, h, _, _ := cleanBlock(t, dev, n)
	f.Fault(t, dev)
	if err := tr.Free(h); !errors.Is(err, uvm.ErrHeldBack) {
		t.Fatalf("Free after a kernel faulted: %v; want uvm.ErrHeldBack", err)
	}
	f.ClearStickyError()              // a context that works again, which a real one never does after a fault
	c, err := dev.StreamCreate(false) // blocking: the legacy stream answers for its capture
	must(t, err)
	t.Cleanup(func() { must(t, dev.StreamDestroy(c)) })
	th := fakecuda.LockedThread(t)
	// The look at the tier's own stream, then the legacy stream's, the last: the call it
	// allows stops. (A pause after the first look would have the capture seen: refused.)
	must(t, f.PauseAfterCaptureChecks(dev, 1))
	synced := make(chan error, 1)
	go func() { synced <- tr.Sync() }()
	began, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(c, icuda.CaptureGlobal) })
	err = <-synced
	must(t, begun())
	if eerr := endCaptureOn(th, dev, c); eerr != nil {
		t.Errorf("a capture begun during a Sync with memory held back (before its synchronize of the device: %v): %v, want a graph", began, eerr)
	}
	t.Logf("Sync: %v", err)
	must(t, tr.Sync())
	if st := tr.Stats(); st.HeldBackDeviceBytes != 0 {
		t.Errorf("after the Syncs: %d bytes of VRAM held back, want 0", st.HeldBackDeviceBytes)
	}
}
