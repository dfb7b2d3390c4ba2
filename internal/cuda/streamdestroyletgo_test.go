package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeStreamDestroyDestroysLetGo: StreamDestroy of a stream destroys the events let go
// after a capture of it took their records (a capture begun by other code): the capture ended
// with the stream, if not before. Before, they stayed let go naming the stream's handle, which
// the driver gives a new stream: while a capture of the new stream went on, each ask of it
// kept them, and with no ask of it they stayed until Close.
func TestFakeStreamDestroyDestroysLetGo(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, err := d.StreamCreate(true)
	need(t, "StreamCreate", err)
	events := cuda.NewEventPool(d)
	ev := taintedEvent(t, f, d, s, events) // its capture ended, no ask of s since
	events.Put(ev)                         // let go
	need(t, "Close of the pool", events.Close())
	need(t, "StreamDestroy", d.StreamDestroy(s))
	if n := d.Stats().Events; n != 0 {
		t.Errorf("%d events alive after StreamDestroy, want the let-go one destroyed", n)
	}
	s2, err := d.StreamCreate(true)
	need(t, "StreamCreate", err)
	if s2 != s {
		t.Fatalf("the new stream has handle %#x, not the destroyed one's %#x", s2, s)
	}
	th := fakecuda.LockedThread(t)
	need(t, "StreamBeginCapture", <-th(func() error {
		return d.StreamBeginCapture(s2, cuda.CaptureGlobal)
	}))
	if st, err := d.StreamIsCapturing(s2); err != nil || st != cuda.CaptureActive {
		t.Errorf("StreamIsCapturing of the new stream = %v, %v; want active", st, err)
	}
	need(t, "StreamEndCapture", <-th(func() error {
		g, err := d.StreamEndCapture(s2)
		if err == nil {
			err = d.GraphDestroy(g)
		}
		return err
	}))
	need(t, "DestroyLetGo", cuda.DestroyLetGo(d))
	need(t, "StreamDestroy", d.StreamDestroy(s2))
}
