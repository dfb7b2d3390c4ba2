package arena

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// releaseRefusingLender is a lender whose Release refuses the first n times it is called,
// changing nothing, as a driver refusing to free or unregister (during a capture, say) does.
type releaseRefusingLender struct {
	*lender
	n, calls atomic.Int32
}

func (l *releaseRefusingLender) Release(r *Region) error {
	l.calls.Add(1)
	if l.n.Add(-1) >= 0 {
		return fmt.Errorf("%w: %w", ErrCommit, errInjected)
	}
	return l.lender.Release(r)
}

// checkRefused fails t unless the arena counts refused regions of reserved bytes, committed
// bytes (the refused ones and any other), and released regions.
func checkRefused(t *testing.T, a *Arena, when string, refused int, reserved, committed uint64, released uint64) {
	t.Helper()
	st := a.Stats()
	if st.RegionsRefused != refused || st.Reserved != reserved || st.Committed != committed || st.RegionsReleased != released {
		t.Fatalf("%s: %d regions refused, %d reserved, %d committed, %d released; want %d, %d, %d, %d",
			when, st.RegionsRefused, st.Reserved, st.Committed, st.RegionsReleased, refused, reserved, committed, released)
	}
}

// TestLentRegionReleaseRefusedRetried: an empty lent region whose Release the provider refuses
// stays the arena's, counted in Stats (reserved, committed, refused), is never handed out again
// and is released again at the next Trim until the provider takes it. Before, the arena
// dropped it at the refusal: the loan stayed out for good and Stats said nothing of it.
func TestLentRegionReleaseRefusedRetried(t *testing.T) {
	l := &releaseRefusingLender{lender: newLender(t, 32<<20, 4<<20)}
	l.n.Store(2)
	a := newTestArena(t, Options{Provider: l, PurgeDelay: -1})
	s, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim() // refused
	if l.nlent() != 1 {
		t.Fatalf("%d loans after the refused release, want 1", l.nlent())
	}
	checkRefused(t, a, "after the refused release", 1, 4<<20, 4<<20, 0)
	if _, ok := a.Lookup(s.Base); ok {
		t.Fatal("Lookup finds a chunk of the refused region")
	}
	s2, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Base >= s.Base-s.Base%(4<<20) && s2.Base < s.Base+4<<20 {
		t.Fatalf("Alloc handed out %#x, in the refused region of %#x", s2.Base, s.Base)
	}
	if err := a.Free(s2); err != nil {
		t.Fatal(err)
	}
	a.Trim() // the refused region refused again; the other released
	if l.nlent() != 1 {
		t.Fatalf("%d loans after the second Trim, want 1", l.nlent())
	}
	checkRefused(t, a, "after the second Trim", 1, 4<<20, 4<<20, 1)
	a.Trim()
	if l.nlent() != 0 {
		t.Fatalf("%d loans after the provider takes the region back, want 0", l.nlent())
	}
	checkRefused(t, a, "once released", 0, 0, 0, 2)
	if c := l.calls.Load(); c != 4 {
		t.Fatalf("%d calls of Release, want 4", c)
	}
}

// TestLentRegionReleaseRefusedPurged: the purge timer's next tick releases such a region
// again, as Trim does. The test runs the ticks itself (the delay is an hour).
func TestLentRegionReleaseRefusedPurged(t *testing.T) {
	l := &releaseRefusingLender{lender: newLender(t, 32<<20, 4<<20)}
	l.n.Store(1)
	a := newTestArena(t, Options{Provider: l, PurgeDelay: time.Hour})
	s, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // released at the third tick: refused
		a.purgeTick()
	}
	checkRefused(t, a, "after the refused release", 1, 4<<20, 4<<20, 0)
	a.purgeTick()
	if l.nlent() != 0 {
		t.Fatalf("%d loans after the next tick, want 0", l.nlent())
	}
	checkRefused(t, a, "after the next tick", 0, 0, 0, 1)
}

// TestCloseReportsRefusedRegion: Close releases a region whose release was refused before,
// and while the provider still refuses, returns an error matching ErrReleaseRefused (and the
// provider's cause); the next Close that the provider accepts returns nil.
func TestCloseReportsRefusedRegion(t *testing.T) {
	l := &releaseRefusingLender{lender: newLender(t, 32<<20, 4<<20)}
	l.n.Store(2)
	a := newTestArena(t, Options{Provider: l, PurgeDelay: -1})
	s, err := a.Alloc(2<<20, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
	a.Trim() // refused
	if err := a.Close(); !errors.Is(err, ErrReleaseRefused) || !errors.Is(err, errInjected) {
		t.Fatalf("Close with the release refused again = %v, want ErrReleaseRefused", err)
	}
	checkRefused(t, a, "after the refused Close", 1, 4<<20, 4<<20, 0)
	if err := a.Close(); err != nil {
		t.Fatalf("the next Close: %v", err)
	}
	if l.nlent() != 0 {
		t.Fatalf("%d loans after Close, want 0", l.nlent())
	}
	checkRefused(t, a, "after Close", 0, 0, 0, 1)
	if err := a.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a third Close = %v, want ErrClosed", err)
	}
}
