package main

import (
	"math"
	"testing"
)

// TestNetP99Ratio checks the p99 ratio less the clock's cost: where the idle p99 is at or below
// the clock's own cost, there is nothing left to divide by and the ratio is no number (the
// target is then UNMEASURED); it was divided by 1 ns instead, a made-up figure that could read
// MET or MISSED.
func TestNetP99Ratio(t *testing.T) {
	for _, c := range []struct{ busy, idle, clock, want float64 }{
		{100, 60, 20, 2},
		{100, 20.5, 20, 160},
		{100, 20, 20, math.NaN()},
		{30, 10, 20, math.NaN()},
	} {
		got := netP99Ratio(c.busy, c.idle, c.clock)
		if !(got == c.want || math.IsNaN(got) && math.IsNaN(c.want)) {
			t.Errorf("netP99Ratio(%g, %g, %g) = %g, want %g", c.busy, c.idle, c.clock, got, c.want)
		}
		tg := ratio("pin-latency-p99", "", got, 1, true, commitLatencyRatio, true, "")
		if math.IsNaN(c.want) && tg.Status != unmeasured {
			t.Errorf("idle p99 %g at or below the clock's %g: the target reads %s", c.idle, c.clock, tg.Status)
		}
	}
}
