package pinned_test

import (
	"errors"
	"sync"
	"testing"
	"time"

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

// guardedNoOrder are the pools whose Free takes the guarded path without a claim of its own to
// defer it to a Hold's Release (no stream order, no ZeroOnFree).
var guardedNoOrder = []pinned.Options{{Quota: 1 << 20}, {RecordSites: true}}

// TestDoubleFreeBesideGuardedRelease: a guarded Free that finds a buffer held after its look at
// the holds, while the Hold's last Release makes an earlier Free of it (a double free racing the
// Release), waits for the Release out of the site table's locks, which that Release's free
// takes, and then reports the double free. A Free that waited for the Release under those locks
// would hang.
func TestDoubleFreeBesideGuardedRelease(t *testing.T) {
	for _, o := range guardedNoOrder {
		o.Capacity, o.Backend = 8<<20, pinned.Pageable
		p := newPool(t, o)
		b, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		inRelease, proceed := make(chan struct{}), make(chan struct{})
		var proceeded sync.Once
		restoreRelease := pinned.SetReleaseHooks(func() { close(inRelease); <-proceed },
			func() { proceeded.Do(func() { close(proceed) }) })
		released := make(chan error, 1)
		var looked sync.Once
		var herr, ferr error // of the Hold and the earlier Free, in the Free's goroutine
		restoreLook := pinned.SetAfterHoldsLook(func() {
			looked.Do(func() {
				// After this Free's look: a Hold, the earlier Free deferred to it, and its
				// Release making that free.
				var h pinned.Hold
				if h, herr = p.Hold(b); herr != nil {
					close(inRelease)
					released <- nil
					return
				}
				ferr = p.Free(b)
				go func() { released <- h.Release() }()
				<-inRelease
			})
		})
		freed := make(chan error, 1)
		go func() { freed <- p.Free(b) }()
		select {
		case err = <-freed:
		case <-time.After(30 * time.Second):
			t.Fatalf("quota %d, sites %v: a Free racing a Release hangs", o.Quota, o.RecordSites)
		}
		restoreLook()
		ok(t, "Hold", herr)
		ok(t, "Free deferred to the Hold", ferr)
		if !errors.Is(err, pinned.ErrDoubleFree) {
			t.Errorf("quota %d, sites %v: second Free beside the Release: %v; want ErrDoubleFree",
				o.Quota, o.RecordSites, err)
		}
		ok(t, "Release", <-released)
		restoreRelease()
		if n := live(t, p); n != 0 {
			t.Errorf("quota %d, sites %v: %d live after the Release; want 0", o.Quota, o.RecordSites, n)
		}
		ok(t, "Close", p.Close())
	}
}

// TestGuardedFreeRacesHold: a guarded Free racing Holds and Releases (run it with -race)
// either frees the buffer between two holds, and the next Hold is refused, or is deferred to a
// Release, which frees it; never refused, never leaked, the quota given back. One goroutine
// holds and releases each buffer until a Hold is refused, while another frees it.
func TestGuardedFreeRacesHold(t *testing.T) {
	rounds := 500
	if testing.Short() {
		rounds = 100
	}
	for _, o := range guardedNoOrder {
		o.Capacity, o.Backend = 8<<20, pinned.Pageable
		p := newPool(t, o)
		for range rounds {
			b, err := p.Alloc(4096)
			ok(t, "Alloc", err)
			started := make(chan struct{})
			var herr, rerr error
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					var h pinned.Hold
					if h, herr = p.Hold(b); herr != nil {
						return
					}
					if i == 0 {
						close(started)
					}
					if rerr = h.Release(); rerr != nil {
						return
					}
				}
			}()
			<-started
			ferr := p.Free(b)
			wg.Wait()
			if ferr != nil || rerr != nil {
				t.Fatalf("quota %d, sites %v: Free %v, Release %v", o.Quota, o.RecordSites, ferr, rerr)
			}
			if !errors.Is(herr, pinned.ErrDoubleFree) && !errors.Is(herr, pinned.ErrNotOwned) {
				t.Fatalf("quota %d, sites %v: Hold after the Free: %v", o.Quota, o.RecordSites, herr)
			}
			if n := live(t, p); n != 0 {
				t.Fatalf("quota %d, sites %v: %d live after Free, Holds and Releases; want 0",
					o.Quota, o.RecordSites, n)
			}
		}
		if o.Quota > 0 { // the quota given back: all of it allocates
			b, err := p.Alloc(o.Quota)
			ok(t, "Alloc of the whole quota", err)
			ok(t, "Free", p.Free(b))
		}
		ok(t, "Close", p.Close())
	}
}
