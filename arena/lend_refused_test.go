package arena

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// refusingLender is a lender whose loans start uncommitted and whose commits fail while told
// to.
type refusingLender struct {
	*lender
	fail atomic.Bool
}

func (l *refusingLender) Reserve(size, align uintptr) (*Region, error) {
	r, err := l.lender.Reserve(size, align)
	if r != nil {
		r.Committed = false
	}
	return r, err
}

func (l *refusingLender) Commit(r *Region, off, n uintptr) error {
	if l.fail.Load() {
		return fmt.Errorf("%w: %w", ErrCommit, errInjected)
	}
	return l.lender.Commit(r, off, n)
}

// TestLentRegionRefusedCommitGivenBack: a region lent for an Alloc whose commit the provider
// refuses holds no chunk, so it goes back as an empty region does (here at Trim), and counts
// as reserved no longer. Before, it was never given back short of Close: the release of empty
// regions skipped a region that had never held a span.
func TestLentRegionRefusedCommitGivenBack(t *testing.T) {
	l := &refusingLender{lender: newLender(t, 32<<20, 4<<20)}
	a := newTestArena(t, Options{Provider: l, PurgeDelay: -1})
	l.fail.Store(true)
	if _, err := a.Alloc(2<<20, 2<<20); !errors.Is(err, ErrCommit) || !errors.Is(err, errInjected) {
		t.Fatalf("Alloc with the commit refused: %v", err)
	}
	if l.nlent() != 1 {
		t.Fatalf("%d loans after the refused Alloc, want 1 (not given back before the purge)", l.nlent())
	}
	a.Trim()
	if n := l.nlent(); n != 0 {
		t.Fatalf("%d loans after Trim: the region whose commit was refused is kept", n)
	}
	if st := a.Stats(); st.Regions != 0 || st.Reserved != 0 || st.ChunksInUse != 0 || st.Committed != 0 {
		t.Fatalf("after Trim: %+v", st)
	}
	l.fail.Store(false)
	s, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatalf("Alloc once commits succeed: %v", err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}

// TestLentRegionRefusedCommitPurged: the purge timer gives such a region back too, a delay
// after the refusal, as it does a region emptied by Free. The test runs the timer's ticks
// itself (the delay is an hour).
func TestLentRegionRefusedCommitPurged(t *testing.T) {
	l := &refusingLender{lender: newLender(t, 32<<20, 4<<20)}
	a := newTestArena(t, Options{Provider: l, PurgeDelay: time.Hour})
	l.fail.Store(true)
	if _, err := a.Alloc(2<<20, 2<<20); !errors.Is(err, ErrCommit) {
		t.Fatalf("Alloc with the commit refused: %v", err)
	}
	if !a.clock.Armed.Load() {
		t.Fatal("no purge timer armed for the empty region")
	}
	for i := 0; i < 2; i++ { // stamped in generation g, it goes at tick g+3: a delay later
		a.purgeTick()
		if l.nlent() != 1 {
			t.Fatalf("given back at tick %d, before the purge delay", i+1)
		}
	}
	a.purgeTick()
	if n := l.nlent(); n != 0 {
		t.Fatalf("%d loans a delay after the refused commit, want 0", n)
	}
	if st := a.Stats(); st.Regions != 0 || st.Reserved != 0 || st.RegionsReleased != 1 {
		t.Fatalf("after the purge: %+v", st)
	}
}
