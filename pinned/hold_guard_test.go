package pinned_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestHoldBetweenGuardedFreeLooksNoScrub: TestHoldBetweenGuardedFreeLooks for the guards that
// do not claim the buffer (a quota, RecordSites, a trace): a Hold between a guarded Free's look
// at the holds and its free defers the Free to the Hold's Release. The heap refused the free
// (the block held), and the Free returned that refusal as ErrNotOwned: the caller's buffer
// stayed live, and leaked once the Release let it go.
func TestHoldBetweenGuardedFreeLooksNoScrub(t *testing.T) {
	for _, o := range []pinned.Options{{Quota: 1 << 20}, {RecordSites: true}} {
		o.Capacity, o.Backend = 8<<20, pinned.Pageable
		p := newPool(t, o)
		b, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		var h pinned.Hold
		var herr error
		restore := pinned.SetAfterHoldsLook(func() { h, herr = p.Hold(b) })
		err = p.Free(b)
		restore()
		ok(t, "Hold between the Free's looks", herr)
		if err != nil {
			t.Errorf("quota %d, sites %v: Free of a buffer held meanwhile: %v", o.Quota, o.RecordSites, err)
		}
		if n := live(t, p); n != 1 {
			t.Errorf("quota %d, sites %v: a Free deferred to a Hold: %d live; want 1", o.Quota, o.RecordSites, n)
		}
		ok(t, "Release", h.Release())
		if n := live(t, p); n != 0 {
			t.Errorf("quota %d, sites %v: the Release left %d live", o.Quota, o.RecordSites, n)
		}
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}
}
