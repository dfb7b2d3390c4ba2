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
// Precommit batch commits elsewhere (in a region with a span in use) goes back at the tick its
// delay ends, during the batch, as it would without one. Before, the ticks during the batch
// skipped the release of empty regions and said none waited: the timer stopped, and the region
// stayed lent until a Trim or other memory started the timer again; later the timer ticked on,
// but the region went back only at a tick after the batch.
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
	var lent [3]int
	for i := range lent { // the timer's ticks, to the delay's end, while the batch commits
		a.purgeTick()
		lent[i] = l.nlent()
	}
	close(l.release)
	if err := <-done; err != nil {
		t.Fatalf("Precommit: %v", err)
	}
	if err := a.Free(s2); err != nil {
		t.Fatal(err)
	}
	if lent != [3]int{2, 2, 1} {
		t.Fatalf("loans after each tick during the batch: %v; want [2 2 1]: the empty region "+
			"back at the third", lent)
	}
}

// TestTrimDuringPrecommitReleasesEmptyLentRegion: Trim while a Precommit batch commits gives
// back an empty lent region, as its doc says it gives back every one, and keeps the region the
// batch commits in (reserved for it: no span holds a chunk of it); the batch then ends as it
// would have, and the next Trim gives its region back too. Before, Trim gave back no region
// while a batch held chunks: the empty one stayed lent.
func TestTrimDuringPrecommitReleasesEmptyLentRegion(t *testing.T) {
	l := &gatedLender{refusingLender: &refusingLender{lender: newLender(t, 32<<20, 4<<20)},
		entered: make(chan struct{}), release: make(chan struct{})}
	a := newTestArena(t, Options{Provider: l, PurgeDelay: time.Hour})
	s, err := a.Alloc(4<<20, 2<<20) // a region of its own, committed whole
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil { // empty; its memory committed, so no batch takes it
		t.Fatal(err)
	}
	l.gate.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := a.Precommit(2 << 20) // in a second region, reserved for the batch
		done <- err
	}()
	<-l.entered
	if n := l.nlent(); n != 2 {
		t.Fatalf("%d loans while the batch commits, want 2", n)
	}
	a.Trim()
	n := l.nlent()
	l.mu.Lock()
	_, kept := l.lent[s.Base]
	l.mu.Unlock()
	close(l.release)
	if err := <-done; err != nil {
		t.Fatalf("Precommit: %v", err)
	}
	if n != 1 || kept {
		t.Fatalf("after Trim during the batch: %d loans, the empty region kept %v; want 1, "+
			"the batch's", n, kept)
	}
	st := a.Stats()
	if st.Regions != 1 || st.Reserved != 4<<20 || st.Committed != 2<<20 ||
		st.Precommitted != 2<<20 || st.RegionsReleased != 1 {
		t.Fatalf("after the batch: %+v", st)
	}
	a.Trim()
	if n := l.nlent(); n != 0 {
		t.Fatalf("%d loans after the Trim after the batch, want 0", n)
	}
	if st := a.Stats(); st.Regions != 0 || st.Reserved != 0 || st.Committed != 0 {
		t.Fatalf("after the last Trim: %+v", st)
	}
}
