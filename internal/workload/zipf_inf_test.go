package workload

import (
	"errors"
	"math"
	"testing"
)

// TestZipfRefusesInfiniteExponent: math/rand's Zipf with s = +Inf never returns from Uint64
// (its rejection loop compares NaNs), so NewZipf must refuse it as it refuses s <= 1 and NaN.
func TestZipfRefusesInfiniteExponent(t *testing.T) {
	for _, s := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), 1} {
		if _, err := NewZipf(10, s, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewZipf(10, %g) = %v, want ErrInvalid", s, err)
		}
	}
	g, err := NewZipf(10, math.MaxFloat64, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b := g.Next(); b != g.Block(0) {
		t.Errorf("Zipf with the largest finite exponent drew block %d, not the hottest %d",
			b, g.Block(0))
	}
}
