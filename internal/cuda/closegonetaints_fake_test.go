package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeCloseForgetsTaintsOfDestroyedContext: on the fake driver, whose last release destroys
// the context's events and gives their handles to the next events created, the Close of the
// last retain forgets the tainted event its owner still holds: no entry stays for a handle that
// names no event of this binding's (TestCloseForgetsTaintsOfDestroyedContext has the rule).
func TestFakeCloseForgetsTaintsOfDestroyedContext(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d, err := cuda.Open(0) // the only retain
	need(t, "Open", err)
	s, err := d.StreamCreate(true)
	need(t, "StreamCreate", err)
	events := cuda.NewEventPool(d)
	held := taintedEvent(t, f, d, s, events) // its owner holds it at Close
	need(t, "Close of the pool", events.Close())
	need(t, "StreamDestroy", d.StreamDestroy(s))
	base := cuda.TaintedHeld()
	need(t, "Close", d.Close())
	if n := f.Stat(fakecuda.Events); n != 0 {
		t.Fatalf("%d events alive after the last release, want 0", n)
	}
	if cuda.EventTainted(held) || cuda.TaintedHeld() != base-1 {
		t.Errorf("after the context's destruction: tainted %v, %d held (was %d); want false, %d",
			cuda.EventTainted(held), cuda.TaintedHeld(), base, base-1)
	}
}
