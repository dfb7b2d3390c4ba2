//go:build cgo && linux

package cuda

import "testing"

// TestEventCreateUntaintsHandle: a handle cuEventCreate has just returned names a new event,
// which no capture can have taken, whatever the tainted events say of an event the handle
// named before. A tainted event the driver destroyed without this binding's EventDestroy (its
// context destroyed, the last retain released or reset elsewhere) left its entry, and a new
// event the driver gave the same handle was taken for tainted: its pool let it go, and its
// owner never trusted it as a point. The test fake gives a destroyed event's handle to the next
// event created; the destroy is made through the driver directly, as a context's destruction
// makes it.
func TestEventCreateUntaintsHandle(t *testing.T) {
	dr, d := openFake(t)
	defer func() { must(t, "Close", d.Close()) }()
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	taint(ev, d, 0)
	must(t, "cuEventDestroy outside EventDestroy", d.Do(func() error { return dr.eventDestroy(ev) }))
	d.events.Add(-1)
	again, err := d.EventCreate(true)
	must(t, "EventCreate after the destroy", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(again)) }()
	if again != ev {
		t.Fatalf("the fake gave the new event handle %#x, not the destroyed one's %#x", again, ev)
	}
	if EventTainted(again) {
		t.Errorf("a new event with a destroyed tainted event's handle %#x is taken for tainted", ev)
	}
	if n, _ := dropTaint(ev); n != notTainted {
		t.Errorf("the destroyed event's taint stays (%d)", n)
	}
}
