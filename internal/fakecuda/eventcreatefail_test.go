package fakecuda

import "testing"

// TestFailAfterEventCreate: FailAfter makes cuEventCreate fail once, after the calls skipped,
// changing nothing: a refused create makes no event (the count of live events unchanged, no
// handle given), and the same call again succeeds.
func TestFailAfterEventCreate(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	events := f.Stat(Events)
	f.FailAfter(CallEventCreate, 1, ResultOutOfMemory)
	e1, err := d.EventCreate(true)
	must(t, "the EventCreate skipped", err)
	e2, err := d.EventCreate(true)
	wantCode(t, "EventCreate", err, ResultOutOfMemory)
	if e2 != 0 {
		t.Errorf("a refused EventCreate gave event %#x, want none", e2)
	}
	if n := f.Stat(Events); n != events+1 {
		t.Errorf("%d events after one create passed and one refused, want %d", n, events+1)
	}
	e2, err = d.EventCreate(false)
	must(t, "EventCreate again", err)
	must(t, "EventDestroy", d.EventDestroy(e1))
	must(t, "EventDestroy", d.EventDestroy(e2))
	if n := f.Stat(Events); n != events {
		t.Errorf("%d events after destroying them all, want %d", n, events)
	}
}
