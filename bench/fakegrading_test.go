//go:build cgo && linux

package main

import (
	"strings"
	"testing"
)

// TestSuitesGradeNothingOnTheFake checks issue 26's rule that every GPU suite marks its GPU
// targets N/A on the fake driver: given figures that would meet every target, the cuda and
// batch suites (whose copy-bandwidth targets once read MET on memcpy timings) and the uvm
// suite's bandwidth targets report N/A with their figures, and report MET off the fake.
func TestSuitesGradeNothingOnTheFake(t *testing.T) {
	var rs []result
	add := func(c, im, metric string, v float64) {
		rs = append(rs, result{Case: c, Impl: im, Metric: metric, Value: v})
	}
	for _, sz := range cudaPairSizes {
		add("cuda-pair/"+sizeName(sz), "cuda-hostalloc", "ns_per_pair", 1e9)
		add("cuda-pair/"+sizeName(sz), "pinmalloc-pool", "ns_per_pair", 10)
	}
	for _, dir := range cudaDirs {
		for _, sz := range cudaCopySizes {
			add("cuda-"+dir+"/"+sizeName(sz), "pinmalloc-pool", "gbps", 50)
			add("cuda-"+dir+"/"+sizeName(sz), "cuda-hostalloc", "gbps", 50)
		}
	}
	for _, sz := range cudaDeviceSizes {
		add("cuda-device-pair/"+sizeName(sz), "cuda-mallocasync", "ns_per_pair", 1e6)
		add("cuda-device-pair/"+sizeName(sz), "pinmalloc-device", "ns_per_pair", 10)
	}
	for _, dir := range batchDirs {
		for _, sz := range batchSizes {
			add("batch-"+dir+"/"+sizeName(sz), "pinmalloc-kernel", "gbps", 100)
			add("batch-"+dir+"/"+sizeName(sz), "cuda-per-copy", "gbps", 1)
		}
	}
	for _, sz := range uvmBlockSizes {
		for _, m := range []string{"evict_gbps", "restore_gbps", "bidir_gbps"} {
			add("uvm-move/"+sizeName(sz), "uvm", m, 1000)
		}
	}
	add("uvm-managed", "managed", "evict_warm_gbps", 1)
	for _, sz := range anchorPairSizes {
		add("cuda-pair/"+sizeName(sz), hostPoolName, "ns_per_pair", 1e6)
	}
	for _, dir := range cudaDirs {
		for _, sz := range anchorCopySizes {
			add("cuda-"+dir+"/"+sizeName(sz), hostPoolName, "gbps", 50)
		}
	}
	add("cuda-setup/1GiB", "pinmalloc-pool", "setup_ms", 100)
	add("cuda-setup/1GiB", hostPoolName, "setup_ms", 300)
	add("cuda-trace", "pinmalloc-pool", "committed_over_live", 1.1)
	for _, fake := range []bool{false, true} {
		var ts []target
		ts = append(ts, (&cudaSuite{fake: fake}).targets(rs)...)
		ts = append(ts, (&batchSuite{fake: fake}).targets(rs)...)
		for _, tg := range (&uvmSuite{fake: fake}).targets(rs) {
			if tg.Name != "uvm-acquire-resident" { // CPU bookkeeping, graded everywhere
				ts = append(ts, tg)
			}
		}
		for _, tg := range ts {
			want := map[bool]string{false: met, true: notApplicable}[fake]
			if tg.Status != want || (fake && !strings.Contains(tg.Detail, "no GPU") && !strings.Contains(tg.Detail, "fake driver")) {
				t.Errorf("fake %v: %s = %s (%s), want %s", fake, tg.Name, tg.Status, tg.Detail, want)
			}
		}
	}
}

// TestAnchorTargets checks the anchors' targets (issue 26) on made-up figures: each met and
// missed as its limit says, against the stronger of CUDA's two host pools (HOST_NUMA, HOST) on
// each case, the trace's limit an upper one, and a target N/A only where the driver makes
// neither pool (their rows say so), never failing for it.
func TestAnchorTargets(t *testing.T) {
	rs := []result{
		{Case: "cuda-pair/4KiB", Impl: hostPoolName, Metric: "ns_per_pair", Value: 2000},
		{Case: "cuda-pair/4KiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: "cuda-pair/16MiB", Impl: hostPoolName, Metric: "ns_per_pair", Value: 900},
		{Case: "cuda-pair/16MiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: "cuda-pair/1MiB", Impl: hostPoolName, Metric: "ns_per_pair", Value: 2000},
		{Case: "cuda-pair/1MiB", Impl: hostPoolHostName, Metric: "ns_per_pair", Value: 800}, // the faster pool: 8x, missed
		{Case: "cuda-pair/1MiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 100},
		{Case: "cuda-setup/1GiB", Impl: hostPoolName, Metric: "setup_ms", Value: 90},
		{Case: "cuda-setup/1GiB", Impl: "pinmalloc-pool", Metric: "setup_ms", Value: 100},
		{Case: "cuda-h2d/1MiB", Impl: hostPoolName, Metric: "gbps", Value: 50},
		{Case: "cuda-h2d/1MiB", Impl: "pinmalloc-pool", Metric: "gbps", Value: 48},
		{Case: "cuda-d2h/1MiB", Impl: hostPoolName, Metric: "error", Note: noHostPools + " at the HOST_NUMA location (device attribute 142 is 0)"},
		{Case: "cuda-d2h/1MiB", Impl: hostPoolHostName, Metric: "gbps", Value: 60}, // HOST alone: graded against it
		{Case: "cuda-d2h/1MiB", Impl: "pinmalloc-pool", Metric: "gbps", Value: 50},
		{Case: "cuda-trace", Impl: "pinmalloc-pool", Metric: "committed_over_live", Value: 1.2},
		{Case: "cuda-trace", Impl: torchName, Metric: "committed_over_live", Value: 1.9},
	}
	want := map[string]string{"pool-vs-cuda-hostpool/4KiB": met, "pool-vs-cuda-hostpool/16MiB": missed, "pool-vs-cuda-hostpool/1MiB": missed,
		"pool-vs-cuda-hostpool/64KiB": unmeasured, "precommit-vs-hostpool-setup/1GiB": missed, "pool-h2d-vs-hostpool/1MiB": met,
		"pool-d2h-vs-hostpool/1MiB": missed, "gpu-trace-committed-over-live": missed}
	got := map[string]target{}
	for _, tg := range anchorTargets(rs) {
		got[tg.Name] = tg
	}
	if len(got) != len(issue26Targets) {
		t.Errorf("%d targets, %d names", len(got), len(issue26Targets))
	}
	for name, status := range want {
		if got[name].Status != status {
			t.Errorf("%s: %+v, want %s", name, got[name], status)
		}
	}
	if !strings.Contains(got["pool-vs-cuda-hostpool/1MiB"].Detail, hostPoolHostName) || !strings.Contains(got["pool-d2h-vs-hostpool/1MiB"].Detail, hostPoolHostName) {
		t.Errorf("not graded against the stronger host pool: %q, %q", got["pool-vs-cuda-hostpool/1MiB"].Detail, got["pool-d2h-vs-hostpool/1MiB"].Detail)
	}
	if !strings.Contains(got["gpu-trace-committed-over-live"].Detail, torchName+" 1.900") {
		t.Errorf("the trace's detail lacks the PyTorch-style cache: %q", got["gpu-trace-committed-over-live"].Detail)
	}
	// A driver that makes neither pool: every target reading them is N/A, with the reason.
	var old []result
	for _, r := range rs {
		if r.Impl != hostPoolName && r.Impl != hostPoolHostName {
			old = append(old, r)
		}
	}
	for _, c := range []string{"cuda-pair/4KiB", "cuda-pair/64KiB", "cuda-pair/1MiB", "cuda-pair/16MiB", "cuda-setup/1GiB", "cuda-h2d/1MiB", "cuda-h2d/16MiB",
		"cuda-h2d/64MiB", "cuda-h2d/256MiB", "cuda-d2h/1MiB", "cuda-d2h/16MiB", "cuda-d2h/64MiB", "cuda-d2h/256MiB"} {
		for _, im := range []string{hostPoolName, hostPoolHostName} {
			old = append(old, result{Case: c, Impl: im, Metric: "error", Note: noHostPools + " (device attribute unknown: CUDA 12.4)"})
		}
	}
	for _, tg := range anchorTargets(old) {
		if tg.Name != "gpu-trace-committed-over-live" && (tg.Status != notApplicable || !strings.Contains(tg.Detail, noHostPools)) {
			t.Errorf("driver without host pools: %s = %s (%s)", tg.Name, tg.Status, tg.Detail)
		}
	}
	c := &check{}
	if !c.naError(result{Metric: "error", Note: noHostPools + ": x"}) || c.naError(result{Metric: "error", Note: "cuda: out of memory"}) {
		t.Error("naError: a driver without host pools is no failure; other errors are")
	}
}

// TestErroredFigureIsUnmeasured: a case that recorded a figure and then an error for the same
// allocator (the copy engine's batch, whose Close fails after its bandwidth was added) is no
// measurement: its targets are UNMEASURED, never MET on the figure taken before the error.
func TestErroredFigureIsUnmeasured(t *testing.T) {
	c := "batch-h2d/64KiB"
	rs := []result{
		{Case: c, Impl: "pinmalloc-kernel", Metric: "gbps", Value: 60, Unit: "GB/s"},
		{Case: c, Impl: "pinmalloc-kernel", Metric: "error", Note: "copyengine: close: CUDA_ERROR_ILLEGAL_ADDRESS"},
	}
	for _, tg := range (&batchSuite{}).targets(rs) {
		if tg.Name == "kernel-h2d/64KiB" && tg.Status != unmeasured {
			t.Errorf("%s %s ratio %g (%s), want UNMEASURED: its case failed", tg.Name, tg.Status, tg.Ratio, tg.Detail)
		}
	}
}
