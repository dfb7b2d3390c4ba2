package device

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeTrimHoldsCaptureGate: a reclaim (Trim) synchronizes each stream whose heap holds
// memory, once it has found that no capture holds it. A capture begun through package cuda on
// another thread between that look and the synchronize must wait for the reclaim (the capture
// gate, cuda.HoldCaptureBegins). Before, the reclaim held no gate there: the capture began in
// between, the synchronize of its stream was refused, and the user's capture was invalidated.
func TestFakeTrimHoldsCaptureGate(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	p := alloc(t, h, 4096, s) // s's heap holds memory: the reclaim synchronizes s
	th := fakecuda.LockedThread(t)
	// The legacy stream's look (WaitLegacyOrder), then s's: the call it allows stops.
	must(t, "PauseAfterCaptureChecks", f.PauseAfterCaptureChecks(dev, 1))
	trimmed := make(chan error, 1)
	go func() { trimmed <- h.Trim() }()
	began, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(s, cuda.CaptureGlobal) })
	err := <-trimmed
	must(t, "StreamBeginCapture", begun())
	if err := <-th(func() error {
		g, err := dev.StreamEndCapture(s)
		if err == nil {
			err = dev.GraphDestroy(g)
		}
		return err
	}); err != nil {
		t.Errorf("a capture begun during a Trim (before its synchronize of the stream: %v): %v, want a graph", began, err)
	}
	t.Logf("Trim: %v", err)
	freeAll(t, h, []cuda.DevicePtr{p})
}
