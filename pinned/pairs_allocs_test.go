package pinned

import (
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// TestPairsAllocateNothing: an Alloc and Free pair, of the sizes the benchmarks take
// (BenchmarkPoolPair's mixed 16 B to 8 KiB, BenchmarkPoolPairSizes' class blocks, object pages
// and a huge object), makes no heap allocation once the pool has made its pages, and no call of
// its memory's provider (no commit or decommit, no driver call) either. The pool's
// purge is off: testing.AllocsPerRun counts every allocation of the process, the purger's too.
func TestPairsAllocateNothing(t *testing.T) {
	if invariants.Enabled {
		t.Skip("the invariants' checks allocate")
	}
	for _, c := range []struct {
		name string
		o    Options
		sz   []int
	}{
		{"mixed", Options{PurgeDelay: -1}, sizes1k(1)},
		{"4KiB", Options{Backend: Pageable, PurgeDelay: -1}, []int{4 << 10}},
		{"64KiB", Options{Backend: Pageable, PurgeDelay: -1}, []int{64 << 10}},
		{"512KiB", Options{Backend: Pageable, PurgeDelay: -1}, []int{512 << 10}},
		{"1MiB", Options{Backend: Pageable, PurgeDelay: -1}, []int{1 << 20}},
		{"4MiB", Options{Backend: Pageable, PurgeDelay: -1}, []int{4 << 20}},
	} {
		p := newTestPool(t, c.o)
		var failed error
		pairs := func() {
			for _, n := range c.sz {
				b, err := p.Alloc(n)
				if err == nil {
					err = p.Free(b)
				}
				if err != nil && failed == nil {
					failed = fmt.Errorf("%d bytes: %w", n, err)
				}
			}
		}
		// A page of every class first, its tables Go memory made once, and under AllocsPerRun's
		// GOMAXPROCS of 1: the one P's shard keeps the huge object for the next pair (another
		// shard's kept one is that shard's).
		testing.AllocsPerRun(1, pairs)
		calls := func() [3]uint64 {
			st := p.a.Stats()
			return [3]uint64{st.Commits + st.Decommits, st.CommitCalls + st.DecommitCalls, st.Counters.DriverCalls}
		}
		before := calls()
		if a := testing.AllocsPerRun(4, pairs); a != 0 {
			t.Errorf("%s: %v allocations per %d pairs, want 0", c.name, a, len(c.sz))
		}
		if after := calls(); after != before {
			t.Errorf("%s: the pairs made provider commits and decommits, arena commits and decommits, driver calls %v -> %v, want none",
				c.name, before, after)
		}
		if failed != nil {
			t.Fatalf("%s: %v", c.name, failed)
		}
	}
}
