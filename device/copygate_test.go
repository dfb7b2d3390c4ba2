package device

import (
	"bytes"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeCopyHoldsCaptureGate: a copy that may not be captured asks first whether a capture
// holds its stream: an HtoDAsync from Go memory (the graph would read that memory at each
// launch, long after the call), a DtoH on the legacy stream (the driver refuses it while a
// blocking stream captures, and ends the capture). A capture begun through package cuda on
// another thread between that ask and the copy must wait for the copy (the capture gate,
// cuda.HoldCaptureBegins). Before, the copies held no gate there: the HtoDAsync's copy went
// into the graph, the call returned nil and the block never got the bytes; the DtoH's capture
// was invalidated.
func TestFakeCopyHoldsCaptureGate(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	const n = 4096
	s := newStream(t, dev, h)
	c := newBlockingStream(t, dev, h)
	p := alloc(t, h, n, s)
	src := bytes.Repeat([]byte{7}, n)
	for _, async := range []bool{true, false} {
		on := c // a capture there takes the legacy stream (DtoH)
		if async {
			on = s
		}
		fill := byte(0)
		if !async {
			fill = 7
		}
		must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), fill, n, pcuda.Stream(s)))
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		th := fakecuda.LockedThread(t)
		must(t, "PauseAfterCaptureCheck", f.PauseAfterCaptureCheck(dev))
		copied := make(chan error, 1)
		got := make([]byte, n)
		go func() {
			if async {
				copied <- h.HtoDAsync(pcuda.DevicePtr(p), src, pcuda.Stream(s))
			} else {
				copied <- h.DtoH(got, pcuda.DevicePtr(p))
			}
		}()
		began, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(on, cuda.CaptureGlobal) })
		err := <-copied
		must(t, "StreamBeginCapture", begun())
		if err := <-th(func() error {
			g, err := dev.StreamEndCapture(on)
			if err == nil {
				err = dev.GraphDestroy(g)
			}
			return err
		}); err != nil {
			t.Errorf("async %v: a capture begun during the copy (before it: %v): %v, want a graph", async, began, err)
		}
		if err != nil {
			t.Logf("async %v: copy: %v", async, err)
			continue
		}
		if async {
			must(t, "StreamSynchronize", dev.StreamSynchronize(s))
			must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(p)))
		}
		if !bytes.Equal(got, src) {
			t.Errorf("async %v: the copy returned nil, and its destination has %#x..., not the source's bytes: it went into the graph of a capture begun during the copy (began before the copy ended: %v)", async, got[0], began)
		}
	}
	freeAll(t, h, []cuda.DevicePtr{p})
}
