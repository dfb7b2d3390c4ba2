package arena

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestLentRegionPrecommittedGivenBackAtTrim: a region lent for Precommit holds no chunk once
// its batch is committed, so Trim, which ends a precommit's hold, gives it back; the purge
// timer, which leaves precommitted memory alone, does not. Before, the region kept the mark
// of a region in use from its reserve and stayed lent until Close.
func TestLentRegionPrecommittedGivenBackAtTrim(t *testing.T) {
	l := &refusingLender{lender: newLender(t, 32<<20, 4<<20)}
	a := newTestArena(t, Options{Provider: l, PurgeDelay: time.Hour})
	if n, err := a.Precommit(4 << 20); err != nil || n != 4<<20 {
		t.Fatalf("Precommit: %d bytes, %v", n, err)
	}
	if l.nlent() != 1 {
		t.Fatalf("%d loans after Precommit, want 1", l.nlent())
	}
	for i := 0; i < 4; i++ { // the timer's ticks, past the delay: precommitted memory stays
		a.purgeTick()
	}
	if l.nlent() != 1 {
		t.Fatalf("%d loans after the purge ticks: the timer gave precommitted memory back", l.nlent())
	}
	a.Trim()
	if n := l.nlent(); n != 0 {
		t.Fatalf("%d loans after Trim: the region Precommit reserved is kept", n)
	}
	st := a.Stats()
	if st.Regions != 0 || st.Reserved != 0 || st.Committed != 0 || st.RegionsReleased != 1 {
		t.Fatalf("after Trim: %+v", st)
	}
}

// TestLentRegionPrecommitRefusedPurged: a region lent for Precommit whose commit the provider
// refuses holds neither a chunk nor precommitted memory, so the purge timer gives it back a
// delay later, as it does a region a refused Alloc left empty (TestLentRegionRefusedCommitPurged).
func TestLentRegionPrecommitRefusedPurged(t *testing.T) {
	l := &refusingLender{lender: newLender(t, 32<<20, 4<<20)}
	a := newTestArena(t, Options{Provider: l, PurgeDelay: time.Hour})
	l.fail.Store(true)
	if _, err := a.Precommit(2 << 20); !errors.Is(err, ErrCommit) {
		t.Fatalf("Precommit with the commit refused: %v", err)
	}
	if !a.clock.Armed.Load() {
		t.Fatal("no purge timer armed for the empty region")
	}
	for i := 0; i < 2; i++ {
		a.purgeTick()
		if l.nlent() != 1 {
			t.Fatalf("given back at tick %d, before the purge delay", i+1)
		}
	}
	a.purgeTick()
	if n := l.nlent(); n != 0 {
		t.Fatalf("%d loans a delay after the refused precommit, want 0", n)
	}
}

// TestLentCommittedRegionPrecommitGivenBack: a lender whose loans come committed leaves
// Precommit nothing to commit in the regions it reserves; they hold no chunk and go back.
func TestLentCommittedRegionPrecommitGivenBack(t *testing.T) {
	l := newLender(t, 32<<20, 4<<20)
	a := newTestArena(t, Options{Provider: l, PurgeDelay: -1})
	for i := 0; i < 2; i++ {
		if n, err := a.Precommit(2 << 20); err != nil || n != 0 {
			t.Fatalf("Precommit %d: %d bytes, %v", i+1, n, err)
		}
	}
	a.Trim()
	if n := l.nlent(); n != 0 {
		t.Fatalf("%d loans after Trim: the region Precommit reserved is kept", n)
	}
}

// reserveCounting is a lender that counts its Reserve calls.
type reserveCounting struct {
	*lender
	reserves atomic.Int32
}

func (l *reserveCounting) Reserve(size, align uintptr) (*Region, error) {
	l.reserves.Add(1)
	return l.lender.Reserve(size, align)
}

// TestLentCommittedPrecommitReservesOnce: over a lender whose loans come committed, Precommit
// has nothing to commit; once a loan has shown it, Precommit reserves no more, whether the
// region is still lent or went back (Trim) between calls. Before, each call reserved a fresh
// region for nothing.
func TestLentCommittedPrecommitReservesOnce(t *testing.T) {
	l := &reserveCounting{lender: newLender(t, 32<<20, 4<<20)}
	a := newTestArena(t, Options{Provider: l, PurgeDelay: -1})
	for i := 0; i < 4; i++ {
		if n, err := a.Precommit(8 << 20); err != nil || n != 0 {
			t.Fatalf("Precommit %d: %d bytes, %v", i+1, n, err)
		}
		if i%2 == 1 {
			a.Trim()
		}
	}
	if n := l.reserves.Load(); n != 1 {
		t.Fatalf("%d loans reserved by 4 calls of Precommit, want 1", n)
	}
	a.Trim()
	if n := l.nlent(); n != 0 {
		t.Fatalf("%d loans after Trim", n)
	}
}
