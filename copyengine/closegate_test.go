package copyengine

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCloseLostHoldsCaptureGate: Close confirms a lost launch (loseLaunch) whose stream was
// destroyed by a synchronize of the context, made only once it found no capture (captureSeen),
// since any capture on the context refuses that synchronize and is ended by it. A capture begun
// through package cuda on another goroutine between that look and the synchronize must wait for
// Close (the capture gate, cuda.HoldCaptureBegins). Before, Close held no gate: the capture
// began in between, the synchronize was refused, and the user's capture was invalidated.
func TestCloseLostHoldsCaptureGate(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, n, n)
	if f == nil {
		return
	}
	s1, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	sc := newStream(t, dev)
	f.Hold(true)
	defer f.Hold(false)
	runtime.LockOSThread() // loseLaunch's capture ends on the thread that began it
	loseLaunch(t, f, dev, b, mkJob(d, host, n), s1)
	runtime.UnlockOSThread()
	must(t, "StreamSynchronize", dev.StreamSynchronize(s1))
	must(t, "StreamDestroy", dev.StreamDestroy(s1)) // Close confirms the launch by the context

	th := fakecuda.LockedThread(t)
	must(t, "PauseAfterCaptureCheck", f.PauseAfterCaptureCheck(dev)) // the legacy stream's, in captureSeen
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	began, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(sc, cuda.CaptureGlobal) })
	err = <-closed
	must(t, "StreamBeginCapture", begun())
	if err := <-th(func() error {
		g, err := dev.StreamEndCapture(sc)
		if err == nil {
			err = dev.GraphDestroy(g)
		}
		return err
	}); err != nil {
		t.Errorf("a capture begun during Close (before its synchronize of the context: %v): %v, want a graph", began, err)
	}
	t.Logf("Close: %v", err)
	if err != nil {
		must(t, "Close again", b.Close())
	}
}
