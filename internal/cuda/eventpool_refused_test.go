package cuda_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestEventPoolKeepsRefused: an event whose destroy the driver refuses (INVALID_HANDLE), at
// Close or at a Put after it, stays in the pool, and a later Close destroys it, once. Close
// said the refusal and forgot the event, and a Put after Close forgot it silently: the driver
// kept it, and nothing could give it back.
func TestEventPoolKeepsRefused(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d := f.Open(t, 0)
	base := f.Stat(fakecuda.Events)
	live := func(what string, want int64) {
		t.Helper()
		if n := f.Stat(fakecuda.Events) - base; n != want {
			t.Errorf("%s: the driver holds %d of the pool's events, want %d", what, n, want)
		}
	}
	pool := cuda.NewEventPool(d)
	var evs []cuda.Event
	for range 3 {
		ev, err := pool.Get()
		need(t, "Get", err)
		evs = append(evs, ev)
	}
	for _, ev := range evs {
		pool.Put(ev)
	}
	f.FailAfter(fakecuda.CallEventDestroy, 1, fakecuda.ResultInvalidHandle)
	err := pool.Close()
	if !errors.Is(err, pinmalloc.ErrInvalidHandle) ||
		strings.Count(err.Error(), "INVALID_HANDLE") != 1 {
		t.Errorf("Close with a destroy refused = %v, want ErrInvalidHandle said once", err)
	}
	live("after a Close with one destroy refused", 1)
	if pool.Destroyed() != 2 {
		t.Errorf("Destroyed = %d after a Close with one destroy refused, want 2", pool.Destroyed())
	}

	ev, err := pool.Get() // closed: a new event
	need(t, "Get after Close", err)
	f.FailAfter(fakecuda.CallEventDestroy, 0, fakecuda.ResultInvalidHandle)
	pool.Put(ev) // refused: kept
	live("after a Put after Close whose destroy is refused", 2)

	need(t, "Close again", pool.Close())
	live("after Close again", 0)
	if pool.Created() != 4 || pool.Destroyed() != 4 {
		t.Errorf("Created %d, Destroyed %d; want 4, 4", pool.Created(), pool.Destroyed())
	}
	need(t, "a third Close", pool.Close())
	live("after a third Close", 0)
}

// TestEventPoolRefusalsSaidOnce: under the context's sticky error (after a kernel faulted)
// the driver refuses every destroy alike; Close says the fault once, not once per event, keeps
// the events, and a Close once the error is cleared destroys each once. Close joined the same
// CUDA_ERROR_ILLEGAL_ADDRESS once per idle event.
func TestEventPoolRefusalsSaidOnce(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d := f.Open(t, 0)
	base := f.Stat(fakecuda.Events)
	pool := cuda.NewEventPool(d)
	var evs []cuda.Event
	for range 4 {
		ev, err := pool.Get()
		need(t, "Get", err)
		evs = append(evs, ev)
	}
	for _, ev := range evs {
		pool.Put(ev)
	}
	f.Fault(t, d)
	err := pool.Close()
	if !errors.Is(err, pinmalloc.ErrDeviceFault) ||
		strings.Count(err.Error(), "ILLEGAL_ADDRESS") != 1 {
		t.Errorf("Close under a sticky error = %v, want ErrDeviceFault said once", err)
	}
	if n := f.Stat(fakecuda.Events) - base; n != 4 {
		t.Errorf("the driver holds %d of the pool's events after the refused Close, want 4", n)
	}
	f.ClearStickyError()
	need(t, "Close once the error is cleared", pool.Close())
	if n := f.Stat(fakecuda.Events) - base; n != 0 || pool.Destroyed() != 4 {
		t.Errorf("after the second Close: the driver holds %d of the pool's events, the pool "+
			"destroyed %d; want 0, 4", n, pool.Destroyed())
	}
}
