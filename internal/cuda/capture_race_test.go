package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeRecordOutsideCaptureRacingBegin: a capture begun on another thread between the ask
// of EventRecordOutsideCapture and its record, by code that does not wait for the capture gate
// (the test holds none, so the module's begin does not wait either), takes the record as a node
// of its graph. Without the second ask the call reported the event recorded, and after the
// capture a query found it complete while the work queued on the stream before it was still
// held: a point the stream had not passed. It must answer the stream capturing, and taint the
// event: no pool takes it back.
func TestFakeRecordOutsideCaptureRacingBegin(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d := f.Open(t, 0)
	s, err := d.StreamCreate(true)
	need(t, "StreamCreate", err)
	buf, err := d.MemAlloc(4096)
	need(t, "MemAlloc", err)
	events := cuda.NewEventPool(d)
	ev, err := events.Get()
	need(t, "Get", err)
	f.Hold(true)
	need(t, "MemsetD8Async", d.MemsetD8Async(buf, 1, 4096, s))
	need(t, "PauseAfterCaptureCheck", f.PauseAfterCaptureCheck(d))
	type answer struct {
		st  cuda.CaptureStatus
		err error
	}
	recorded := make(chan answer, 1)
	go func() {
		st, err := d.EventRecordOutsideCapture(ev, s)
		recorded <- answer{st, err}
	}()
	f.WaitPaused(t)
	th := fakecuda.LockedThread(t)
	begin := func() error { return d.StreamBeginCapture(s, cuda.CaptureGlobal) }
	need(t, "StreamBeginCapture", <-th(begin))
	f.ResumeCall()
	a := <-recorded
	need(t, "StreamEndCapture", <-th(func() error {
		g, err := d.StreamEndCapture(s)
		if err == nil {
			err = d.GraphDestroy(g)
		}
		return err
	}))
	need(t, "EventRecordOutsideCapture", a.err)
	if a.st == cuda.CaptureNone {
		if err := d.EventQuery(ev); err == nil {
			t.Fatal("EventRecordOutsideCapture reported a point that a capture took: " +
				"the event reads complete while the work queued before it is held")
		}
		t.Fatal("EventRecordOutsideCapture reported the event recorded in a stream that began capturing")
	}
	if !cuda.EventTainted(ev) {
		t.Fatal("the event a capture may have taken is not tainted")
	}
	taken := cuda.TaintedEvents()
	events.Put(ev)
	if events.Idle() != 0 || cuda.EventTainted(ev) || cuda.TaintedEvents() != taken {
		t.Fatalf("after Put of the tainted event: %d idle, tainted %v, %d tainted in all (was %d); "+
			"want 0 idle, false, unchanged",
			events.Idle(), cuda.EventTainted(ev), cuda.TaintedEvents(), taken)
	}
	need(t, "EventDestroy", d.EventDestroy(ev)) // the graph that named it is destroyed
	f.Hold(false)
	need(t, "StreamSynchronize", d.StreamSynchronize(s))
	need(t, "MemFree", d.MemFree(buf))
	need(t, "StreamDestroy", d.StreamDestroy(s))
	need(t, "Close", events.Close())
}
