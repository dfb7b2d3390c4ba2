package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeLetGoDestroyedAfterCapture: a tainted event let go by its pool (a capture begun by
// other code between EventRecordOutsideCapture's asks took its record) is destroyed once the
// capture has ended, by the next ask of its Device that finds its stream not capturing
// (StreamIsCapturing, or EventRecordOutsideCapture's own ask); not while the capture goes on,
// nor by an ask of another stream. It was never destroyed: each such event leaked for the life
// of the process.
func TestFakeLetGoDestroyedAfterCapture(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, err := d.StreamCreate(true)
	need(t, "StreamCreate", err)
	other, err := d.StreamCreate(true)
	need(t, "StreamCreate", err)
	events := cuda.NewEventPool(d)
	alive := func(what string, want int64) {
		t.Helper()
		if n := d.Stats().Events; n != want {
			t.Errorf("%s: %d events alive, want %d", what, n, want)
		}
	}

	// The capture goes on: its event stays.
	ev, th := taintedDuringCapture(t, f, d, s, events)
	events.Put(ev) // let go
	alive("the capture going on", 1)
	st, err := d.StreamIsCapturing(s)
	need(t, "StreamIsCapturing", err)
	if st != cuda.CaptureActive {
		t.Fatalf("s captures: %v, want active", st)
	}
	alive("after an ask that finds s capturing", 1)
	if _, err := d.StreamIsCapturing(other); err != nil {
		t.Fatal(err)
	}
	alive("after an ask of another stream", 1)
	need(t, "StreamEndCapture", <-th(func() error {
		g, err := d.StreamEndCapture(s)
		if err == nil {
			err = d.GraphDestroy(g)
		}
		return err
	}))
	alive("the capture ended, before any ask", 1)
	if st, err := d.StreamIsCapturing(s); err != nil || st != cuda.CaptureNone {
		t.Fatalf("StreamIsCapturing once the capture ended = %v, %v", st, err)
	}
	alive("after an ask that finds s not capturing", 0)

	// The capture ended before Put: the next record's ask destroys it.
	ev = taintedEvent(t, f, d, s, events)
	events.Put(ev)
	alive("a let-go event", 1)
	ev2, err := events.Get()
	need(t, "Get", err)
	alive("a let-go event and a new one", 2)
	st, err = d.EventRecordOutsideCapture(ev2, s)
	if err != nil || st != cuda.CaptureNone {
		t.Fatalf("EventRecordOutsideCapture = %v, %v", st, err)
	}
	alive("after a record whose ask finds s not capturing", 1)
	events.Put(ev2)
	need(t, "DestroyLetGo", cuda.DestroyLetGo(d)) // nothing left to it
	need(t, "StreamSynchronize", d.StreamSynchronize(s))
	need(t, "StreamDestroy", d.StreamDestroy(s))
	need(t, "StreamDestroy", d.StreamDestroy(other))
	need(t, "Close", events.Close())
}

// taintedDuringCapture is taintedEvent with the capture left going on, on the locked thread th
// that began it: the caller ends it there.
func taintedDuringCapture(t *testing.T, f *fakecuda.Driver, d *cuda.Device, s cuda.Stream,
	events *cuda.EventPool) (cuda.Event, func(func() error) <-chan error) {
	t.Helper()
	ev, err := events.Get()
	need(t, "Get", err)
	need(t, "PauseAfterCaptureCheck", f.PauseAfterCaptureCheck(d))
	recorded := make(chan error, 1)
	go func() {
		_, err := d.EventRecordOutsideCapture(ev, s)
		recorded <- err
	}()
	f.WaitPaused(t)
	th := fakecuda.LockedThread(t)
	need(t, "StreamBeginCapture", <-th(func() error {
		return d.StreamBeginCaptureUngated(s, cuda.CaptureGlobal)
	}))
	f.ResumeCall()
	need(t, "EventRecordOutsideCapture", <-recorded)
	if !cuda.EventTainted(ev) {
		t.Fatal("the event a capture may have taken is not tainted")
	}
	return ev, th
}
