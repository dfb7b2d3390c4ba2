package main

import (
	"strings"
	"testing"
)

// TestLatencyTargetsNeedAPurge checks that the purge-latency targets are graded only on runs in
// which the purger gave back at least purgeLatencyMinShare of what was freed while the churn
// was timed: with nothing purged, or 13.6 KB of some 700 MiB freed (a -quick run of the
// former footprint/latency), "p99 while the purger works" compared two runs with next to no
// purge and read MET.
func TestLatencyTargetsNeedAPurge(t *testing.T) {
	latency := func(c, im string, freed, purged float64) []result {
		rs := []result{
			{Case: c, Impl: im, Metric: "alloc_p99_ns_purging", Value: 60, Unit: "ns"},
			{Case: c, Impl: im, Metric: "alloc_p99_ns_no_purge", Value: 58, Unit: "ns"},
			{Case: c, Impl: im, Metric: "alloc_p999_ns_purging", Value: 900, Unit: "ns"},
			{Case: c, Impl: im, Metric: "alloc_p999_ns_no_purge", Value: 880, Unit: "ns"},
			{Case: c, Impl: im, Metric: "purged_bytes_per_run", Value: purged, Unit: "B"},
		}
		if freed >= 0 { // negative: not counted
			rs = append(rs, result{Case: c, Impl: im, Metric: "freed_bytes_per_run", Value: freed,
				Unit: "B"})
		}
		return rs
	}
	const freed = 700 << 20
	for _, tc := range []struct {
		freed, purged float64
		graded        bool
	}{
		{freed, 0, false},
		{freed, 13.6e3, false},
		{freed, freed*purgeLatencyMinShare - 1, false},
		{-1, freed, false}, // what was freed is not known
		{0, 0, false},
		{freed, freed * purgeLatencyMinShare, true},
		{freed, freed * 1.02, true}, // whole granules given back: more than asked for
	} {
		rs := append(latency("footprint/latency", "pinmalloc-pool", tc.freed, tc.purged),
			latency("footprint/device-latency", "pinmalloc-device", tc.freed, tc.purged)...)
		n := 0
		for _, tg := range footprintTargets(rs) {
			if !strings.Contains(tg.Name, "latency") {
				continue
			}
			n++
			switch {
			case !tc.graded && (tg.Status != unmeasured || !strings.Contains(tg.Detail, "purge")):
				t.Errorf("freed %g, purged %g: %s reads %s (%s), want UNMEASURED saying why",
					tc.freed, tc.purged, tg.Name, tg.Status, tg.Detail)
			case tc.graded && tg.Status != met:
				t.Errorf("freed %g, purged %g: %s reads %s (%s), want MET",
					tc.freed, tc.purged, tg.Name, tg.Status, tg.Detail)
			}
		}
		if n != 2 {
			t.Errorf("%d purge-latency targets, want 2", n)
		}
	}
}
