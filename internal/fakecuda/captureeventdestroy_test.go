package fakecuda

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestCaptureEventDestroyAfterCapture: a record made with the default flags in a capture is no
// node of the capture's graph (D: cuEventRecordWithFlags, CU_EVENT_RECORD_EXTERNAL: "When using
// stream capture, create an event record node instead of the default behavior"), so once the
// capture has ended its event may be destroyed while the graph lives: the destroy succeeds and
// the graph is destroyed after it. internal/cuda destroys the events a foreign capture took
// then (capturetaint.go). On the fake this states the model; on a GPU it asks the driver
// (which cannot show that a launch of the graph leaves the event alone: the binding has no
// cuGraphLaunch).
func TestCaptureEventDestroyAfterCapture(t *testing.T) { onFake(t, captureEventDestroyAfterCapture) }

func captureEventDestroyAfterCapture(t *testing.T, d *cuda.Device) {
	x := newAsyncFixture(t, nil, d, 4096)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	capture(t, d, x.s, cuda.CaptureGlobal)
	must(t, "MemsetD8Async in the capture", d.MemsetD8Async(x.dev, 1, x.n, x.s))
	must(t, "EventRecord in the capture", d.EventRecord(ev, x.s))
	must(t, "MemsetD8Async after the record", d.MemsetD8Async(x.dev, 2, x.n, x.s))
	g, err := d.StreamEndCapture(x.s)
	if err != nil || g == 0 {
		t.Fatalf("StreamEndCapture = %#x, %v; want a graph", g, err)
	}
	answer(t, "EventDestroy of an event recorded in an ended capture, its graph alive",
		d.EventDestroy(ev), 0)
	answer(t, "GraphDestroy after the destroy of an event recorded in its capture",
		d.GraphDestroy(g), 0)
}
