package arena

import (
	"sync/atomic"
	"testing"
	"time"
)

// gatedLender is a refusingLender whose first Commit after gate is set waits for release.
type gatedLender struct {
	*refusingLender
	gate             atomic.Bool
	entered, release chan struct{}
}

func (l *gatedLender) Commit(r *Region, off, n uintptr) error {
	if l.gate.CompareAndSwap(true, false) {
		close(l.entered)
		<-l.release
	}
	return l.refusingLender.Commit(r, off, n)
}

// TestLentRegionWaitsThroughPrecommit: an empty lent region whose delay passes while a
// Precommit batch commits elsewhere (in a region with a span in use) keeps the purge timer
// armed, and goes back at a tick after the batch. Before, the ticks during the batch skipped
// the release of empty regions and said none waited: the timer stopped, and the region stayed
// lent until a Trim or other memory started the timer again.
func TestLentRegionWaitsThroughPrecommit(t *testing.T) {
	l := &gatedLender{refusingLender: &refusingLender{lender: newLender(t, 32<<20, 4<<20)},
		entered: make(chan struct{}), release: make(chan struct{})}
	a := newTestArena(t, Options{Provider: l, PurgeDelay: time.Hour})
	s1, err := a.Alloc(4<<20, 2<<20) // a region of its own, committed whole
	if err != nil {
		t.Fatal(err)
	}
	s2, err := a.Alloc(2<<20, 2<<20) // one chunk of a second region
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s1); err != nil { // its region empty: the timer armed for it
		t.Fatal(err)
	}
	l.gate.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := a.Precommit(2 << 20) // the free chunk of the second region
		done <- err
	}()
	<-l.entered
	for i := 0; i < 3; i++ { // the timer's ticks, past the delay, while the batch commits
		a.purgeTick()
	}
	close(l.release)
	if err := <-done; err != nil {
		t.Fatalf("Precommit: %v", err)
	}
	a.mu.Lock()
	armed := a.clock.Armed.Load()
	a.mu.Unlock()
	if n := l.nlent(); n != 2 || !armed {
		t.Fatalf("after the batch: %d loans, timer armed %v; want 2, armed for the empty one",
			n, armed)
	}
	a.purgeTick()
	if n := l.nlent(); n != 1 {
		t.Fatalf("%d loans after the next tick, want 1: the empty region kept", n)
	}
	if err := a.Free(s2); err != nil {
		t.Fatal(err)
	}
}
