package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeEventDestroyUntaints: EventDestroy of a tainted event (a capture begun between
// EventRecordOutsideCapture's asks took its record), once the graph that named it is destroyed,
// takes it out of the tainted events: before, its handle stayed tainted, so that a new event
// the driver gave the same handle was taken for tainted (let go by its pool), and one let go
// by a pool and destroyed so was destroyed again by DestroyLetGo.
func TestFakeEventDestroyUntaints(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, err := d.StreamCreate(true)
	need(t, "StreamCreate", err)
	events := cuda.NewEventPool(d)
	held := cuda.TaintedHeld()
	held1, held2 := taintedEvent(t, f, d, s, events), taintedEvent(t, f, d, s, events)
	need(t, "EventDestroy of a tainted event held", d.EventDestroy(held1))
	if cuda.EventTainted(held1) || cuda.TaintedHeld() != held+1 {
		t.Errorf("after EventDestroy of a tainted event: tainted %v, %d held (was %d); want false, %d",
			cuda.EventTainted(held1), cuda.TaintedHeld(), held, held+1)
	}
	events.Put(held2) // let go for good
	need(t, "EventDestroy of a tainted event let go", d.EventDestroy(held2))
	need(t, "DestroyLetGo after the let-go event's EventDestroy", cuda.DestroyLetGo(d))
	need(t, "StreamDestroy", d.StreamDestroy(s))
	need(t, "Close", events.Close())
}

// taintedEvent returns an event of events whose record on s a capture begun between
// EventRecordOutsideCapture's asks took (TestFakeRecordOutsideCaptureRacingBegin); the capture
// has ended and its graph is destroyed.
func taintedEvent(t *testing.T, f *fakecuda.Driver, d *cuda.Device, s cuda.Stream,
	events *cuda.EventPool) cuda.Event {
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
	begin := func() error { return d.StreamBeginCapture(s, cuda.CaptureGlobal) }
	need(t, "StreamBeginCapture", <-th(begin))
	f.ResumeCall()
	rerr := <-recorded
	need(t, "StreamEndCapture", <-th(func() error {
		g, err := d.StreamEndCapture(s)
		if err == nil {
			err = d.GraphDestroy(g)
		}
		return err
	}))
	need(t, "EventRecordOutsideCapture", rerr)
	if !cuda.EventTainted(ev) {
		t.Fatal("the event a capture may have taken is not tainted")
	}
	return ev
}
