package copyengine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortSpans checks the radix sort against a comparison sort on random spans: starts spread
// over a few bits, over many, equal starts, and the empty and one-element cases.
func TestSortSpans(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 7, 300, 8192} {
		for _, spread := range []uint{0, 4, 20, 40, 64} {
			s := make([]span, n)
			base := uintptr(rng.Uint64())
			for i := range s {
				var off uintptr
				if spread > 0 {
					off = uintptr(rng.Uint64() >> (64 - spread))
				}
				s[i] = span{base + off, uintptr(i)}
			}
			want := slices.Clone(s)
			slices.SortStableFunc(want, func(x, y span) int {
				switch {
				case x.lo < y.lo:
					return -1
				case x.lo > y.lo:
					return 1
				}
				return 0
			})
			got := sortSpans(s, make([]span, n))
			if !slices.Equal(got, want) {
				t.Fatalf("n %d, spread %d bits: radix sort disagrees with a stable comparison sort", n, spread)
			}
		}
	}
}
