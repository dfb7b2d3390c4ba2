package pinned_test

import (
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeStreamPairsAllocateNothing: an Alloc and FreeAsync pair on an idle stream, and an
// Alloc, RecordStream and Free, make no heap allocation, the reclaims they cause included
// (one every reclaimWeight buffers: a reclaim once allocated its error list for a nil error,
// 1/32 of an allocation a pair, which a benchmark rounds to 0 allocs/op). The pool's purge is
// off: testing.AllocsPerRun counts every allocation of the process, and a purger tick that
// ran during the pairs (a pause of a purge delay) added its own.
func TestFakeStreamPairsAllocateNothing(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	if invariants.Enabled {
		t.Skip("the invariants' checks allocate")
	}
	s := pubcuda.Stream(r.s)
	pairs := map[string]func(b []byte) error{
		"FreeAsync": func(b []byte) error { return r.pool.FreeAsync(b, s) },
		"RecordStream+Free": func(b []byte) error {
			if err := r.pool.RecordStream(b, s); err != nil {
				return err
			}
			return r.pool.Free(b)
		},
	}
	for name, free := range pairs {
		allocs := testing.AllocsPerRun(4, func() {
			for range 1024 { // reclaims by the dozen
				b, err := r.pool.Alloc(4 << 10)
				if err == nil {
					err = free(b)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per 1024 pairs, want 0", name, allocs)
		}
	}
	r.finish()
}
