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
