package arena

import (
	"math"
	"testing"
)

// TestRegionSizeAbsurd: a RegionSize past what rounding to the chunk size can hold (a caller's
// "as big as it gets", math.MaxUint) gives regions of the capacity, as any RegionSize above it
// does. Before, the rounding overflowed, its error was dropped and RegionSize became 0, so
// every Alloc reserved a region of its own size: 64 small Allocs used up the 64 regions and
// the next failed with ErrCapacity while most of the capacity was left.
func TestRegionSizeAbsurd(t *testing.T) {
	for _, rs := range []uintptr{math.MaxUint, math.MaxUint - 1<<20, 1 << 62} {
		a := newTestArena(t, Options{Capacity: 256 << 20, RegionSize: rs, PurgeDelay: -1})
		var spans []Span
		for i := range 70 {
			s, err := a.Reserve(2<<20, 1)
			if err != nil {
				t.Fatalf("RegionSize %#x: Reserve %d of 2 MiB in an arena of 256 MiB: %v",
					rs, i, err)
			}
			spans = append(spans, s)
		}
		if st := a.Stats(); st.Reserved != 256<<20 {
			t.Errorf("RegionSize %#x: %d bytes reserved, want one region of the capacity (256 MiB)",
				rs, st.Reserved)
		}
		for _, s := range spans {
			if err := a.Free(s); err != nil {
				t.Fatal(err)
			}
		}
	}
}
