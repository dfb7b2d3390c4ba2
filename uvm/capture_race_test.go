package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestReleaseRacingForeignCapture: a capture begun by another binding of the driver (which the
// capture gate cannot hold off) between the ask of a Release's record and the record takes the
// record: the event stands for no point of the stream. The Release is refused with
// ErrCapturing, and the tier must not keep
// the event, neither a new one (back to its idle release events) nor a block's release event
// for the stream (recorded again by the next Release): both kept it, tainted.
func TestReleaseRacingForeignCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 2, 64*kib)
	// The first block's Release takes a new release event; the second's records again the one
	// its earlier Release on s recorded.
	_, err := tr.Acquire(hs[1], s, uvm.Write)
	must(t, err)
	must(t, tr.Release(hs[1], s))
	for _, h := range hs {
		_, err := tr.Acquire(h, s, uvm.Write)
		must(t, err)
		th := fakecuda.LockedThread(t)
		must(t, f.PauseAfterCaptureCheck(dev))
		released := make(chan error, 1)
		go func() { released <- tr.Release(h, s) }()
		f.WaitPaused(t)
		must(t, <-th(func() error { return dev.StreamBeginCaptureUngated(uintptr(s), icuda.CaptureGlobal) }))
		f.ResumeCall()
		err = <-released
		must(t, endCaptureOn(th, dev, uintptr(s)))
		if !errors.Is(err, pinmalloc.ErrCapturing) {
			t.Fatalf("a Release whose record a capture took: %v, want ErrCapturing", err)
		}
		if n := icuda.TaintedHeld(); n != 0 {
			t.Fatalf("the tier keeps %d events a capture took", n)
		}
		must(t, tr.Release(h, s)) // the use went on: released now
	}
	must(t, tr.Close())
	must(t, icuda.DestroyLetGo(dev)) // the graphs that named them are destroyed
}
