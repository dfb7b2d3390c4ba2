//go:build cgo && linux

package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestDeviceLatencyOnTheFakeReadsNA runs footprint/device-latency (-quick) on the fake driver,
// as bench -footprint does without a GPU, and grades it: footprint-device-latency-p99 reads
// N/A, whatever the fake's figures (it read MET or MISSED from them).
func TestDeviceLatencyOnTheFakeReadsNA(t *testing.T) {
	if raceEnabled {
		// 22 s under the race detector for a grade: device's tests race its purger.
		t.Skip("a grade of the case's figures: nothing for the race detector that device's own tests do not race")
	}
	if fakecuda.Run(t) == nil {
		return
	}
	dev, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	rs := footprintDeviceLatency(&suite{cfg: &config{quick: true, implFilter: matchAll}}, dev)
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if e, failed := failure(rs, "footprint/device-latency", "pinmalloc-device"); failed {
		t.Fatal(errors.New(e))
	}
	n := 0
	for _, tg := range footprintTargets(rs) {
		if tg.Name != "footprint-device-latency-p99" {
			continue
		}
		n++
		if tg.Status != notApplicable || !strings.Contains(tg.Detail, "fake driver") {
			t.Errorf("on the fake: %s reads %s ratio %.3g (%s), want N/A: the fake's figure is no GPU's", tg.Name, tg.Status, tg.Ratio, tg.Detail)
		}
	}
	if n != 1 {
		t.Errorf("%d footprint-device-latency-p99 targets, want 1", n)
	}
}

// TestDeviceLatencyNotGradedOnTheFake: footprint-device-latency-p99 times a device heap's Alloc
// while the purger decommits device memory, which on the fake driver is host memory and its
// VMM calls a cost model: a run on the fake (its case marked fakeDriverMetric) reads N/A with
// its figures, never MET or MISSED; the same figures off the fake are graded, and the pool's
// footprint-latency-p99 (host memory, no driver) is graded on either.
func TestDeviceLatencyNotGradedOnTheFake(t *testing.T) {
	const freed = 700 << 20
	latency := func(c, im string, purging float64) []result {
		return []result{
			{Case: c, Impl: im, Metric: "alloc_p99_ns_purging", Value: purging, Unit: "ns"},
			{Case: c, Impl: im, Metric: "alloc_p99_ns_no_purge", Value: 60, Unit: "ns"},
			{Case: c, Impl: im, Metric: "freed_bytes_per_run", Value: freed, Unit: "B"},
			{Case: c, Impl: im, Metric: "purged_bytes_per_run", Value: freed, Unit: "B"},
		}
	}
	for _, tc := range []struct {
		purging float64
		graded  string
	}{{70, met}, {500, missed}} {
		for _, fake := range []bool{false, true} {
			rs := append(latency("footprint/latency", "pinmalloc-pool", tc.purging),
				latency("footprint/device-latency", "pinmalloc-device", tc.purging)...)
			if fake {
				rs = append(rs, result{Case: "footprint/device-latency", Impl: "pinmalloc-device", Metric: fakeDriverMetric, Value: 1, Unit: "bool"})
			}
			got := map[string]target{}
			for _, tg := range footprintTargets(rs) {
				got[tg.Name] = tg
			}
			if tg := got["footprint-latency-p99"]; tg.Status != tc.graded {
				t.Errorf("fake %v: the pool's %s reads %s (%s), want %s: host memory, graded anywhere", fake, tg.Name, tg.Status, tg.Detail, tc.graded)
			}
			tg := got["footprint-device-latency-p99"]
			switch {
			case fake && (tg.Status != notApplicable || !strings.Contains(tg.Detail, "fake driver")):
				t.Errorf("fake: %s reads %s (%s), want N/A saying the fake driver: its figure is no GPU's", tg.Name, tg.Status, tg.Detail)
			case !fake && tg.Status != tc.graded:
				t.Errorf("GPU: %s reads %s (%s), want %s", tg.Name, tg.Status, tg.Detail, tc.graded)
			}
		}
	}
}
