package uvm_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestCloseHeldBackDuringCapture: a Close with memory held back, while a capture holds a user's
// stream the tier knows, keeps the memory (the synchronize of the device that gives it back
// would end that capture) and says why, naming the stream, once: Close's held-back error kept
// ErrCapturing's text alone ("stream is capturing a graph"), not which capture, nor that the
// synchronize would end it. (The tier's cleanup closes it again, the capture over.)
func TestCloseHeldBackDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, h, _, s := cleanBlock(t, dev, 64*kib) // acquired and released on s
	refuseD2H(t, dev, tr)
	if err := tr.Free(h); !errors.Is(err, uvm.ErrHeldBack) {
		t.Fatalf("Free with the tier's D2H stream refused: %v; want uvm.ErrHeldBack", err)
	}
	beginCapture(t, dev, s)
	var err error
	elsewhere(func() { err = tr.Close() })
	endCapture(t, dev, s)
	if !errors.Is(err, uvm.ErrHeldBack) || !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Fatalf("Close with memory held back, a user's stream capturing: %v; "+
			"want uvm.ErrHeldBack and pinmalloc.ErrCapturing", err)
	}
	why := fmt.Sprintf("would end the CUDA graph capture on stream %#x", s)
	if n := strings.Count(err.Error(), why); n != 1 {
		t.Errorf("Close with memory held back, a user's stream capturing: %q says %d times %q; "+
			"want once", err, n, why)
	}
	if n := strings.Count(err.Error(), uvm.ErrHeldBack.Error()); n != 1 {
		t.Errorf("Close: %q says %d times %q; want once", err, n, uvm.ErrHeldBack)
	}
}
