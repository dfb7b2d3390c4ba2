package device

import (
	"bytes"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeClearHoldsCaptureGate: with Options.ZeroOnFree, a Free or FreeAsync clears the block
// (a memset on the legacy stream, or on the FreeAsync's stream) once it has found that no
// capture holds that stream (streamq.CaptureRefusal). A capture begun through package cuda on
// another thread between that look and the memset must wait for the free (the capture gate,
// cuda.HoldCaptureBegins). Before, the free held no gate there: a capture begun on the
// FreeAsync's stream took the memset into its graph (the FreeAsync returned nil, and the block,
// reused at once on its stream, was not cleared); one begun on a blocking stream during a Free
// was invalidated by the clear on the legacy stream.
func TestFakeClearHoldsCaptureGate(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	const n = 4096
	s := newStream(t, dev, h)
	c := newBlockingStream(t, dev, h)
	for _, async := range []bool{true, false} {
		on := c // a capture there takes the legacy stream (Free's clear)
		if async {
			on = s // the FreeAsync's stream
		}
		p := alloc(t, h, n, s)
		must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 0xff, n, pcuda.Stream(s)))
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		th := fakecuda.LockedThread(t)
		must(t, "PauseAfterCaptureCheck", f.PauseAfterCaptureCheck(dev)) // the clear's look
		freed := make(chan error, 1)
		go func() {
			if async {
				freed <- h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s))
			} else {
				freed <- h.Free(pcuda.DevicePtr(p))
			}
		}()
		began, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(on, cuda.CaptureGlobal) })
		err := <-freed
		must(t, "StreamBeginCapture", begun())
		if err := <-th(func() error {
			g, err := dev.StreamEndCapture(on)
			if err == nil {
				err = dev.GraphDestroy(g)
			}
			return err
		}); err != nil {
			t.Errorf("async %v: a capture begun during the free (before its clear: %v): %v, want a graph", async, began, err)
		}
		if err != nil {
			t.Logf("async %v: free: %v", async, err)
			must(t, "Free again", h.Free(pcuda.DevicePtr(p)))
			continue
		}
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		q := alloc(t, h, n, s) // the block freed on s, reused at once
		got := make([]byte, n)
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
		if q == p && !bytes.Equal(got, make([]byte, n)) {
			t.Errorf("async %v: the block freed with ZeroOnFree came back uncleared (%#x...): its memset went into the graph of a capture begun during the free (began before the free ended: %v)", async, got[0], began)
		}
		freeAll(t, h, []cuda.DevicePtr{q})
	}
}
