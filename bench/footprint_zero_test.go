package main

import (
	"strings"
	"testing"
)

// TestFootprintTargetsNeedLiveBytes checks that a footprint target cannot read MET on a case
// that measured no live bytes: footprint-low-idle compared idle with live + 1 MiB, so a pool
// that held half a MiB for nothing live read MET.
func TestFootprintTargetsNeedLiveBytes(t *testing.T) {
	rs := []result{
		{Case: "footprint/larson-low", Impl: "pinmalloc-pool", Metric: "live_bytes", Value: 0},
		{Case: "footprint/larson-low", Impl: "pinmalloc-pool", Metric: "held_idle_bytes", Value: 512 << 10},
		{Case: "footprint/larson-high", Impl: "pinmalloc-pool", Metric: "live_bytes", Value: 0},
		{Case: "footprint/larson-high", Impl: "pinmalloc-pool", Metric: "held_idle_bytes", Value: 512 << 10},
		{Case: "footprint/trace", Impl: cudaHostName, Metric: "committed_over_live", Value: 0},
		{Case: "footprint/trace", Impl: "pinmalloc-pool", Metric: "committed_over_live", Value: 1.1},
	}
	for _, tg := range footprintTargets(rs) {
		if tg.Status == met {
			t.Errorf("%s reads MET on no live bytes: %+v", tg.Name, tg)
		}
	}
	for _, tg := range footprintTargets(rs) {
		if tg.Name == "footprint-low-idle" && (tg.Status != unmeasured || !strings.Contains(tg.Detail, "no live bytes")) {
			t.Errorf("%s: %s (%s); want UNMEASURED saying there were no live bytes", tg.Name, tg.Status, tg.Detail)
		}
	}
}
