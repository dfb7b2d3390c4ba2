package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestFootprintCase runs a small larson shape on every allocator of the test suite that can
// say what it holds: each reports the bytes live and what it held, the pool gives back at
// idle what its buffers do not use, and every size drawn lies in the shape's range.
func TestFootprintCase(t *testing.T) {
	s, locked := testSuite(t)
	sh := larsonShape{name: "larson-test", threads: 4, slots: 8, lo: 8, hi: 64 << 10}
	seen := 0
	for _, im := range s.selected() {
		if im.larson == nil {
			continue
		}
		r, err := im.larson(sh, 2000, 50*time.Millisecond)
		if errors.Is(err, errNoFootprint) {
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", im.name, err)
		}
		seen++
		if r.live < uint64(sh.threads*sh.slots*sh.lo) || r.live > uint64(sh.threads*sh.slots*sh.hi) || r.end == 0 || r.nsPerOp <= 0 {
			t.Errorf("%s: %+v", im.name, r)
		}
		if im.name == "pinmalloc-pool" && r.idle > r.live+1<<20 {
			t.Errorf("pinmalloc-pool held %d bytes idle for %d live", r.idle, r.live)
		}
	}
	if locked && seen < 2 {
		t.Errorf("%d allocators measured", seen)
	}
	for i := range uint64(1000) {
		if n := larsonSize(larsonDraw(1, i), 8, 1000); n < 8 || n > 1000 {
			t.Fatalf("size %d outside [8, 1000]", n)
		}
	}
}

// TestFootprintTargets grades made-up figures: the low case against live + 1 MiB, the high one
// against 1.1x live, and the others shown in the detail.
func TestFootprintTargets(t *testing.T) {
	rs := []result{
		{Case: "footprint/larson-low", Impl: "pinmalloc-pool", Metric: "live_bytes", Value: 2 << 20},
		{Case: "footprint/larson-low", Impl: "pinmalloc-pool", Metric: "held_idle_bytes", Value: 3 << 20},
		{Case: "footprint/larson-low", Impl: "mimalloc", Metric: "live_bytes", Value: 2 << 20},
		{Case: "footprint/larson-low", Impl: "mimalloc", Metric: "held_idle_bytes", Value: 14 << 20},
		{Case: "footprint/larson-low", Impl: "mimalloc", Metric: "held_trimmed_bytes", Value: 8 << 20},
		{Case: "footprint/larson-high", Impl: "pinmalloc-pool", Metric: "live_bytes", Value: 10 << 20},
		{Case: "footprint/larson-high", Impl: "pinmalloc-pool", Metric: "held_idle_bytes", Value: 12 << 20},
	}
	got := map[string]target{}
	for _, tg := range footprintTargets(rs) {
		got[tg.Name] = tg
	}
	if tg := got["footprint-low-idle"]; tg.Status != met || !strings.Contains(tg.Detail, "mimalloc idle 7.00x, trimmed 4.00x") {
		t.Errorf("low: %+v", tg)
	}
	if tg := got["footprint-high-idle"]; tg.Status != missed || tg.Ratio != 1.2 {
		t.Errorf("high: %+v", tg)
	}
	if tg := footprintTargets(nil); tg[0].Status != unmeasured || tg[1].Status != unmeasured {
		t.Errorf("nothing measured: %+v", tg)
	}
}
