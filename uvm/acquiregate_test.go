package uvm_test

import (
	"testing"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestAcquireHoldsCaptureGate: an Acquire that queues a wait on its stream (for the block's
// release on another stream) checks first that no capture holds the stream (notCapturing): the
// wait would be a node of the user's graph. A capture begun through package cuda on another
// thread between that check and the wait must wait for the Acquire (the capture gate,
// icuda.HoldCaptureBegins). Before, the Acquire held no gate there: the capture began in
// between, the driver refused the wait (an event recorded outside the capture) and invalidated
// the capture, and the Acquire failed with CUDA_ERROR_STREAM_CAPTURE_ISOLATION.
func TestAcquireHoldsCaptureGate(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s1, s2 := stream(t, dev), stream(t, dev)
	hs := filled(t, tr, 2, 64*kib)
	acquireAll(t, tr, s2, uvm.Read, hs[1:]) // s2 known: the Acquire checks it no more
	acquireAll(t, tr, s1, uvm.Write, hs[:1])
	th := fakecuda.LockedThread(t)
	must(t, f.PauseAfterCaptureCheck(dev)) // the Acquire's check that s2 does not capture
	acquired := make(chan error, 1)
	go func() { _, err := tr.Acquire(hs[0], s2, uvm.Read); acquired <- err }()
	began, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(uintptr(s2), icuda.CaptureGlobal) })
	err := <-acquired
	must(t, begun())
	eerr := endCaptureOn(th, dev, uintptr(s2))
	if eerr != nil {
		t.Errorf("a capture begun during an Acquire (before its wait: %v): %v, want a graph (Acquire: %v)", began, eerr, err)
	}
	must(t, err)
	must(t, tr.Release(hs[0], s2))
}
