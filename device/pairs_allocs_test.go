package device

import (
	"fmt"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// TestFakePairsAllocateNothing: an Alloc on a stream and its free make no heap allocation once
// the stream's heap has its pages, for the sizes the benchmarks and DESIGN.md's figures take (4
// KiB to 1 MiB, HugeThreshold): a Free, a FreeAsync on the block's own stream (reusable at once),
// and a FreeAsync on another stream, deferred and done by a later Alloc's poll (the
// BenchmarkFakeCrossStreamFree cycle). The purge is off: testing.AllocsPerRun counts every
// allocation of the process, the purge timer's too. The first two make no driver call either:
// no stream query, no event record, no memory call. (A huge block, above HugeThreshold, is a
// run of chunks of its own, made and given back to the arena each time: not counted here.)
func TestFakePairsAllocateNothing(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	if invariants.Enabled {
		t.Skip("the invariants' checks allocate")
	}
	s := pcuda.Stream(newStream(t, dev, h))
	other := pcuda.Stream(newStream(t, dev, h))
	frees := []struct {
		name       string
		free       func(pcuda.DevicePtr) error
		sameStream bool // no driver call either: the block is free on s at once
	}{
		{"Free", h.Free, true},
		{"FreeAsync on its stream", func(p pcuda.DevicePtr) error { return h.FreeAsync(p, s) }, true},
		{"FreeAsync on another stream", func(p pcuda.DevicePtr) error { return h.FreeAsync(p, other) }, false},
	}
	for _, n := range []int{4 << 10, 64 << 10, 1 << 20} {
		for _, fr := range frees {
			var failed error
			pair := func() {
				p, err := h.Alloc(n, s)
				if err == nil {
					err = fr.free(p)
				}
				if err != nil && failed == nil {
					failed = err
				}
			}
			pair() // the stream's heap and its page, made once
			calls := h.Stats().Arena.Counters.DriverCalls
			queries, records := f.Stat(fakecuda.StreamQueries), f.Stat(fakecuda.EventRecords)
			if a := testing.AllocsPerRun(50, pair); a != 0 {
				t.Errorf("%d bytes, %s: %v allocations per pair, want 0", n, fr.name, a)
			}
			q, r := f.Stat(fakecuda.StreamQueries)-queries, f.Stat(fakecuda.EventRecords)-records
			c := h.Stats().Arena.Counters.DriverCalls - calls
			if fr.sameStream && (q != 0 || r != 0 || c != 0) {
				t.Errorf("%d bytes, %s: %d stream queries, %d event records, %d memory calls of the driver, want none",
					n, fr.name, q, r, c)
			}
			must(t, fmt.Sprintf("%d bytes, %s", n, fr.name), failed)
		}
	}
	must(t, "Sync", h.Sync())
}
