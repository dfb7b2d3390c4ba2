package main

import (
	"strings"
	"testing"
)

// TestLatencyTargetsNeedAPurge checks that the purge-latency targets are graded only on runs in
// which the purger did work while the churn was timed: with nothing purged, "p99 while the
// purger works" compared two runs without a purge and read MET.
func TestLatencyTargetsNeedAPurge(t *testing.T) {
	latency := func(c, im, counted string, n float64) []result {
		return []result{
			{Case: c, Impl: im, Metric: "alloc_p99_ns_purging", Value: 60, Unit: "ns"},
			{Case: c, Impl: im, Metric: "alloc_p99_ns_no_purge", Value: 58, Unit: "ns"},
			{Case: c, Impl: im, Metric: "alloc_p999_ns_purging", Value: 900, Unit: "ns"},
			{Case: c, Impl: im, Metric: "alloc_p999_ns_no_purge", Value: 880, Unit: "ns"},
			{Case: c, Impl: im, Metric: counted, Value: n},
		}
	}
	for _, n := range []float64{0, 1 << 20} {
		rs := append(latency("footprint/latency", "pinmalloc-pool", "purged_bytes_per_run", n),
			latency("footprint/device-latency", "pinmalloc-device", "purges_per_run", n/(1<<20))...)
		for _, tg := range footprintTargets(rs) {
			if !strings.Contains(tg.Name, "latency") {
				continue
			}
			switch {
			case n == 0 && (tg.Status != unmeasured || !strings.Contains(tg.Detail, "purge")):
				t.Errorf("nothing purged: %s reads %s (%s), want UNMEASURED saying so", tg.Name, tg.Status, tg.Detail)
			case n > 0 && tg.Status != met:
				t.Errorf("purged %g: %s reads %s (%s), want MET", n, tg.Name, tg.Status, tg.Detail)
			}
		}
	}
}
