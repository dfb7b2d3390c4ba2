package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestFreeRacingCapture: a capture that begins on the stream a block is acquired on after
// Free's check of that stream and before the record of the block's release event there (begun
// by another binding of the driver, which the capture gate cannot hold off) makes the record
// refuse, with ErrCapturing. Free must then be refused as a Release is, the block still
// acquired: before, it took the refusal for a record that failed and waited for the stream
// instead (unordered), a synchronize of the capturing stream that the driver refused and that
// invalidated the user's capture.
func TestFreeRacingCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	h := filled(t, tr, 1, 64*kib)[0]
	_, err := tr.Acquire(h, s, uvm.Write)
	must(t, err)
	th := fakecuda.LockedThread(t)
	must(t, f.PauseAfterCaptureCheck(dev)) // Free's check of s
	freed := make(chan error, 1)
	go func() { freed <- tr.Free(h) }()
	f.WaitPaused(t)
	must(t, <-th(func() error { return dev.StreamBeginCaptureUngated(uintptr(s), icuda.CaptureGlobal) }))
	f.ResumeCall()
	err = <-freed
	if eerr := endCaptureOn(th, dev, uintptr(s)); eerr != nil {
		t.Errorf("a capture begun during a Free of a block acquired on its stream: %v, want a graph (Free: %v)", eerr, err)
	}
	if !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Fatalf("a Free whose release a capture refused: %v, want ErrCapturing", err)
	}
	t.Logf("Free: %v", err)
	must(t, tr.Free(h)) // nothing was freed: freed now
	must(t, tr.Close())
}
