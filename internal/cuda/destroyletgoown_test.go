package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeDestroyLetGoThroughOwnDevice: DestroyLetGo(d) destroys an event let go by another
// open Device through that Device, which counted it: each Device's Stats (and its sites) lose
// the event it made. Before, every let-go event was destroyed through d: d counted one event
// fewer than it made (-1), and the Device that made it one more, a leak to its tests.
func TestFakeDestroyLetGoThroughOwnDevice(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	d2, err := cuda.Open(0)
	need(t, "Open", err)
	s, err := d2.StreamCreate(true)
	need(t, "StreamCreate", err)
	events := cuda.NewEventPool(d2)
	ev := taintedEvent(t, f, d2, s, events) // its capture ended, no ask of s since
	events.Put(ev)                          // let go by d2's pool
	need(t, "Close of the pool", events.Close())
	before := d.Stats().Events
	need(t, "DestroyLetGo through the other Device", cuda.DestroyLetGo(d))
	if n := f.Stat(fakecuda.Events); n != 0 {
		t.Errorf("%d events alive after DestroyLetGo, want 0", n)
	}
	if n := d.Stats().Events; n != before {
		t.Errorf("DestroyLetGo's Device counts %d events, was %d: it lost one it never made",
			n, before)
	}
	if n := d2.Stats().Events; n != 0 {
		t.Errorf("the Device that made the let-go event counts %d events after its destroy, want 0",
			n)
	}
	need(t, "StreamDestroy", d2.StreamDestroy(s))
	need(t, "Close", d2.Close())
}
