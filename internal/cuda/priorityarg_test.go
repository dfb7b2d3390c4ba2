package cuda

import (
	"math"
	"testing"
)

// TestPriorityArgClamps: a priority beyond the driver's int reaches it clamped, on the side it
// was given, so that the driver clamps it into the device's range as StreamCreateWithPriority
// says. Before, it was truncated to 32 bits: math.MaxInt (meant as "the least priority") became
// -1, a raised priority on an H100, and 1<<31 the greatest.
func TestPriorityArgClamps(t *testing.T) {
	for _, c := range []struct {
		in   int
		want int32
	}{
		{0, 0}, {-5, -5}, {3, 3},
		{math.MaxInt32, math.MaxInt32}, {math.MinInt32, math.MinInt32},
		{1 << 31, math.MaxInt32}, {math.MaxInt, math.MaxInt32}, {1 << 32, math.MaxInt32},
		{math.MinInt32 - 1, math.MinInt32}, {math.MinInt, math.MinInt32}, {-1 << 32, math.MinInt32},
	} {
		if got := priorityArg(c.in); got != c.want {
			t.Errorf("priorityArg(%d) = %d, want %d", c.in, got, c.want)
		}
	}
}
