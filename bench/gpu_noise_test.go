//go:build cgo && linux

package main

import (
	"strings"
	"testing"
	"time"
)

// TestGPUTargetsNoisy: the GPU suites' targets are ratios of timings taken in rounds
// (interleave: the pairs, the copies, the copy engine's batches; setupRounds: the set-ups), and
// one whose rounds disagree by more than its margin reads NOISY, as the CPU suite's do, not MET;
// one whose rounds agree is graded; on the fake both read N/A. They read MET on spreads of
// 1.1 - 1.3x around ratios within 5 % of their limits.
func TestGPUTargetsNoisy(t *testing.T) {
	var rs []result
	add := func(c, im, metric string, v, spread float64) {
		rs = append(rs, result{Case: c, Impl: im, Metric: metric, Value: v},
			result{Case: c, Impl: im, Metric: "round_spread", Value: spread, Unit: "ratio"})
	}
	add("cuda-pair/4KiB", "cuda-hostalloc", "ns_per_pair", 1.05e6, 1.1) // 10,500x against 10,000
	add("cuda-pair/4KiB", "pinmalloc-pool", "ns_per_pair", 100, 1.1)
	add("cuda-pair/4KiB", hostPoolName, "ns_per_pair", 1050, 1.1)         // 10.5x against 10
	add("cuda-pair/64KiB", "cuda-hostalloc", "ns_per_pair", 1.05e6, 1.01) // the same, rounds agreeing
	add("cuda-pair/64KiB", "pinmalloc-pool", "ns_per_pair", 100, 1.01)
	add("cuda-h2d/1MiB", "pinmalloc-pool", "gbps", 48, 1.1) // 0.96 against 0.95
	add("cuda-h2d/1MiB", "cuda-hostalloc", "gbps", 50, 1.1)
	add("cuda-d2h/1MiB", hostPoolName, "gbps", 50, 1.1)
	add("cuda-d2h/1MiB", "pinmalloc-pool", "gbps", 48, 1.1)
	add("cuda-device-pair/4KiB", "cuda-mallocasync", "ns_per_pair", 1050, 1.1) // 10.5x against 10
	add("cuda-device-pair/4KiB", "pinmalloc-device", "ns_per_pair", 100, 1.1)
	add("batch-h2d/4KiB", "pinmalloc-kernel", "gbps", 50, 1.1) // 50 GB/s against 48
	add("batch-h2d/4KiB", "cuda-per-copy", "gbps", 4.9, 1.1)   // 10.2x against 10
	// The set-up of 1 GiB, three rounds each: 100 ms (100 - 130) against 105 (105 - 140).
	times := func(ms ...int) func() (time.Duration, error) {
		i := 0
		return func() (time.Duration, error) {
			i++
			return time.Duration(ms[i-1]) * time.Millisecond, nil
		}
	}
	rs = append(rs, setupRounds("cuda-setup/1GiB", []setupEntrant{{"pinmalloc-pool", times(100, 130, 100)},
		{hostPoolName, times(105, 105, 140)}}, 3)...)
	noisyOnes := []string{"pool-vs-cuda-hostalloc/4KiB", "pool-vs-cuda-hostpool/4KiB", "pool-h2d-vs-hostalloc/1MiB",
		"pool-d2h-vs-hostpool/1MiB", "device-vs-mallocasync/4KiB", "kernel-h2d/4KiB", "kernel-vs-per-copy-h2d/4KiB",
		"precommit-vs-hostpool-setup/1GiB"}
	for _, fake := range []bool{false, true} {
		got := map[string]target{}
		for _, ts := range [][]target{(&cudaSuite{fake: fake}).targets(rs), (&batchSuite{fake: fake}).targets(rs)} {
			for _, tg := range ts {
				got[tg.Name] = tg
			}
		}
		for _, name := range noisyOnes {
			tg, ok := got[name]
			switch {
			case !ok:
				t.Errorf("no target %s", name)
			case fake && tg.Status != notApplicable:
				t.Errorf("fake: %s reads %s (%s), want N/A", name, tg.Status, tg.Detail)
			case !fake && (tg.Status != noisy || tg.Spread <= 1 || !strings.Contains(tg.Detail, "too noisy to grade")):
				t.Errorf("%s reads %s ratio %.4g spread %.3g (%s), want NOISY: its rounds disagree by more than its margin",
					name, tg.Status, tg.Ratio, tg.Spread, tg.Detail)
			}
		}
		if tg := got["pool-vs-cuda-hostalloc/64KiB"]; !fake && (tg.Status != met || tg.Spread == 0) {
			t.Errorf("%s reads %s spread %.3g (%s), want MET: its rounds agree within its margin", tg.Name, tg.Status, tg.Spread, tg.Detail)
		}
	}
}

// TestGpucheckNoisyTarget: in the GPU check a NOISY target is its own status, neither PASS nor a
// miss: the report counts it, and a run whose only target not passed is NOISY exits 3, not 0.
func TestGpucheckNoisyTarget(t *testing.T) {
	rs := []result{
		{Case: "cuda-pair/4KiB", Impl: "cuda-hostalloc", Metric: "ns_per_pair", Value: 1.05e6},
		{Case: "cuda-pair/4KiB", Impl: "cuda-hostalloc", Metric: "round_spread", Value: 1.1},
		{Case: "cuda-pair/4KiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: "cuda-pair/4KiB", Impl: "pinmalloc-pool", Metric: "round_spread", Value: 1.1},
	}
	saved := gpuTargets
	defer func() { gpuTargets = saved }()
	gpuTargets = nil
	for _, s := range gpuSuites {
		gpuTargets = append(gpuTargets, s.targets)
	}
	c := newCheck(t, t.TempDir(), false)
	c.bench = &suite{cfg: c.cfg, results: rs}
	c.Steps = []stepResult{{Name: "bench", Status: pass}}
	c.evaluate()
	ct := findCheck(c, "pool-vs-cuda-hostalloc/4KiB")
	if ct.Status != noisy || !strings.Contains(ct.Detail, "too noisy to grade") {
		t.Errorf("a target whose rounds disagree: %+v, want NOISY", ct)
	}
	if !strings.Contains(c.summary(), "1 too noisy to grade") {
		t.Errorf("summary %q does not count the NOISY target", c.summary())
	}
	c.Checks = []checkResult{ct, {Name: "gpu-tests", Status: pass, Kind: "run"}}
	if c.exitCode() != 3 || c.verdict() != fail {
		t.Errorf("a NOISY target and nothing failed: exit %d, %s; want 3, FAIL: it was not graded", c.exitCode(), c.verdict())
	}
}
