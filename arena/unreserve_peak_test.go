package arena

import (
	"errors"
	"testing"
)

// TestUnreserveRefusedPeakCommitted: a region committed whole at Reserve that grow cannot use
// and whose release the provider refuses stays counted in Committed, and PeakCommitted counts
// it too: the peak is never below a Committed figure reached. Before, PeakCommitted stayed 0
// while Committed read the region's size.
func TestUnreserveRefusedPeakCommitted(t *testing.T) {
	p := newReleaseCountdown(PageableHost(HostOptions{Populate: true}), 1)
	a := newTestArena(t, Options{Provider: p, Capacity: 16 << 20, RegionSize: 4 << 20,
		PurgeDelay: -1})
	a.observers = append(a.observers, refuseMapped{}) // as Observe adds one, with no region yet
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrReleaseRefused) {
		t.Fatalf("Alloc: %v, want the refused release in it", err)
	}
	st := a.Stats()
	if st.Committed != 4<<20 || st.PeakCommitted < st.Committed {
		t.Fatalf("%d committed, peak %d; want %d committed, and a peak at least that",
			st.Committed, st.PeakCommitted, 4<<20)
	}
	a.Trim()
	if st := a.Stats(); st.Committed != 0 || st.PeakCommitted != 4<<20 {
		t.Fatalf("after Trim: %d committed, peak %d; want 0, %d", st.Committed,
			st.PeakCommitted, 4<<20)
	}
}
