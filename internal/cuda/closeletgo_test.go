package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeCloseDestroysLetGo: Close of a Device destroys the events its pools let go (tainted
// by a capture begun by other code) whose capture has ended, and forgets those whose capture
// goes on, leaving them to the driver: no let-go event names the closed Device after. Before,
// they stayed let go with it for the life of the process, the Device kept in memory: no ask of
// the closed Device could destroy them, and DestroyLetGo of another Device took them, the
// events of a context that may be gone.
func TestFakeCloseDestroysLetGo(t *testing.T) {
	f, d := fakecuda.RunDevice(t) // holds the primary context: the events outlive d2's Close
	if f == nil {
		return
	}
	d2, err := cuda.Open(0)
	need(t, "Open", err)
	s, err := d2.StreamCreate(true)
	need(t, "StreamCreate", err)
	s2, err := d2.StreamCreate(true)
	need(t, "StreamCreate", err)
	events := cuda.NewEventPool(d2)
	ended := taintedEvent(t, f, d2, s2, events)
	events.Put(ended) // let go, its capture ended
	going, th := taintedDuringCapture(t, f, d2, s, events)
	events.Put(going) // let go, its capture going on
	need(t, "Close of the pool", events.Close())
	if n := f.Stat(fakecuda.Events); n != 2 {
		t.Fatalf("%d events alive before Close, want the 2 let go", n)
	}
	need(t, "Close", d2.Close())
	if n := f.Stat(fakecuda.Events); n != 1 {
		t.Errorf("%d events alive after Close, want 1: the let-go one whose capture goes on", n)
	}
	need(t, "StreamEndCapture", <-th(func() error {
		g, err := d.StreamEndCapture(s)
		if err == nil {
			err = d.GraphDestroy(g)
		}
		return err
	}))
	need(t, "DestroyLetGo of the Device left", cuda.DestroyLetGo(d))
	if n := f.Stat(fakecuda.Events); n != 1 {
		t.Errorf("%d events alive after DestroyLetGo of another Device, want 1: "+
			"the closed Device's let-go events are no more let go", n)
	}
	d3, err := cuda.Open(0) // destroys what d2 made, with d's Stats left as they were
	need(t, "Open", err)
	need(t, "EventDestroy of the event Close left", d3.EventDestroy(going))
	need(t, "StreamDestroy", d3.StreamDestroy(s))
	need(t, "StreamDestroy", d3.StreamDestroy(s2))
	need(t, "Close", d3.Close())
}
