package heap

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// TestTryFreeRemoteIsForeign checks that the non-blocking remote free (TryFree, TryFreeHeld
// of another heap's block: pinned's Free on another P) counts itself among the group's
// foreign changes, as the blocking one does: it moves a state word, then sets a remote bit,
// and a walk of the owner's invariants between the two sees a block lost. So the owner's
// verifyQuiet, run over and over while another heap's owner TryFrees its blocks, must never
// return an error.
func TestTryFreeRemoteIsForeign(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the group counts foreign changes only with invariants.Enabled (-race, -tags invariants)")
	}
	h := newTestHeap(t, 256<<20, Options{})
	other, err := h.g.NewHeap(Options{})
	if err != nil {
		t.Fatal(err)
	}
	rounds := 40
	if raceEnabled || testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		ps := make([]uintptr, 2048)
		for i := range ps {
			if ps[i], err = h.Alloc(64); err != nil {
				t.Fatal(err)
			}
		}
		// Share every page first (TryFree refuses an exclusive one), with one held block each
		// so that they stay shared (keepShared) while the owner walks them.
		for i := 0; i < len(ps); i += 256 {
			if _, err := h.g.HoldSized(ps[i], 64); err != nil {
				t.Fatal(err)
			}
		}
		var done atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Store(true)
			for i, p := range ps {
				var ok bool
				if i%256 == 0 {
					ok = other.TryFreeHeld(p, 64)
				} else {
					ok = other.TryFree(p, 64)
				}
				if !ok {
					t.Errorf("round %d: TryFree of %#x from another heap refused", round, p)
				}
			}
		}()
		walks := 0
		for !done.Load() {
			if err := h.verifyQuiet(); err != nil {
				done.Store(true)
				wg.Wait()
				t.Fatalf("round %d: an owner's walk during another heap's TryFrees: %v", round, err)
			}
			walks++
		}
		wg.Wait()
		h.Collect()
		if err := h.verify(); err != nil {
			t.Fatal(err)
		}
		if round == 0 {
			t.Logf("%d walks during %d TryFrees", walks, len(ps))
		}
	}
}
