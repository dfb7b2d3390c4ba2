package copyengine

import (
	"bytes"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestCopyHoldsCaptureGate: a capture begun through package cuda on another thread while a
// Copy of the kernel method is between its check that the stream does not capture and its
// launch must wait for the Copy (the capture gate, cuda.HoldCaptureBegins), so that the launch
// and its staging event are the stream's work, not nodes of the user's graph: a graph would read
// the staging buffer, which the next Copy rewrites, at each of its launches. Before, Copy held
// no gate: the capture began between the two, took the launch into its graph, and the batch
// never moved.
func TestCopyHoldsCaptureGate(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	src, dst := hostMem(t, dev, n), hostMem(t, dev, n)
	fill(mem.Bytes(src, n), 5)
	for _, o := range []Options{{Method: MethodKernel}, {Method: MethodKernel, LowPriority: true}} {
		b := newBatcher(t, dev, o)
		s := newStream(t, dev)
		must(t, "Copy", b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(s))) // the stream checked, a staging buffer made
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		clear(mem.Bytes(dst, n))

		th := fakecuda.LockedThread(t)
		must(t, "PauseAfterCaptureCheck", f.PauseAfterCaptureCheck(dev))
		copied := make(chan error, 1)
		go func() { copied <- b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(s)) }()
		began, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(s, cuda.CaptureGlobal) })
		err := <-copied
		must(t, "StreamBeginCapture", begun())
		must(t, "StreamEndCapture", <-th(func() error {
			g, err := dev.StreamEndCapture(s)
			if err == nil {
				err = dev.GraphDestroy(g)
			}
			return err
		}))
		must(t, "Copy, a capture begun on its stream meanwhile", err)
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		if !bytes.Equal(mem.Bytes(dst, n), mem.Bytes(src, n)) {
			t.Errorf("%+v: the Copy's batch did not move: its launch went into the graph of a capture begun during the Copy (began before the Copy ended: %v)", o, began)
		}
	}
}
