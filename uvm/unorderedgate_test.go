package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestReleaseDestroyedHoldsCaptureGate: a Release of a block acquired on a stream the user
// destroyed waits for the work queued there with a synchronize of the device, once it has found
// that no capture holds a stream it knows, nor the legacy stream (captured). A capture begun
// through package cuda on another thread between that look and the synchronize must wait for
// the Release (the capture gate, icuda.HoldCaptureBegins). Before, the tier held no gate
// there: the capture, on a blocking stream, began in between, and the synchronize of the
// device invalidated it.
func TestReleaseDestroyedHoldsCaptureGate(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	h := filled(t, tr, 1, 64*kib)[0]
	c, err := dev.StreamCreate(false) // blocking: the legacy stream answers for its capture
	must(t, err)
	t.Cleanup(func() { must(t, dev.StreamDestroy(c)) })
	raw, err := dev.StreamCreate(true)
	must(t, err)
	dead := cuda.Stream(raw)
	_, err = tr.Acquire(h, dead, uvm.Read)
	must(t, err)
	must(t, dev.StreamDestroy(raw))
	th := fakecuda.LockedThread(t)
	// The look at the tier's own stream, then the legacy stream's, the last: the call it
	// allows stops. (A pause after the first look would have the capture seen: refused.)
	must(t, f.PauseAfterCaptureChecks(dev, 1))
	released := make(chan error, 1)
	go func() { released <- tr.Release(h, dead) }()
	began, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(c, icuda.CaptureGlobal) })
	err = <-released
	must(t, begun())
	if eerr := endCaptureOn(th, dev, c); eerr != nil {
		t.Errorf("a capture begun during a Release on a destroyed stream (before its synchronize of the device: %v): %v, want a graph", began, eerr)
	}
	t.Logf("Release: %v", err)
	if errors.Is(err, pinmalloc.ErrCapturing) {
		must(t, tr.Release(h, dead))
	}
}
