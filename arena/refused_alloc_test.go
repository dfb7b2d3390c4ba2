package arena

import (
	"errors"
	"testing"
	"time"
)

// TestAllocRetriesRefusedRelease: an Alloc that finds no capacity left because a region the
// provider refused to release still counts against it releases that region again first, and
// succeeds once the provider takes it back. Before, the Alloc failed with ErrCapacity until the
// retry timer (backing off up to a minute), a Trim or a Close released the region.
func TestAllocRetriesRefusedRelease(t *testing.T) {
	p := &releaseRefusing{Provider: PageableHost(HostOptions{})}
	// The retry timer waits an hour: only the Alloc can release the region in time.
	a := newTestArena(t, Options{Provider: p, Capacity: 16 << 20, RegionSize: 16 << 20,
		PurgeDelay: time.Hour})
	a.observers = append(a.observers, refuseMapped{}) // refuses the first region grow reserves
	p.fail.Store(true)
	if _, err := a.Alloc(1<<20, 1); !errors.Is(err, ErrReleaseRefused) {
		t.Fatalf("Alloc: %v, want the region refused", err)
	}
	checkRefused(t, a, "after the refused release", 1, 16<<20, 0, 0)
	a.observers = nil
	p.fail.Store(false)
	s, err := a.Alloc(1<<20, 1)
	if err != nil {
		t.Fatalf("Alloc with the capacity held by a region the provider now releases: %v", err)
	}
	checkRefused(t, a, "after the Alloc", 0, 16<<20, 1<<20, 0)
	if err := a.Free(s); err != nil {
		t.Fatal(err)
	}
}
