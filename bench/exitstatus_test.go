package main

import "testing"

// TestFailedCases checks that a case an allocator failed on is counted as a failure of the run
// (main then exits 1), and that a row left empty on purpose (a capability the driver lacks, a
// case the fake driver cannot run, a case skipped for the memlock limit) is not.
func TestFailedCases(t *testing.T) {
	rs := []result{
		{Case: "pair/64KiB", Impl: "pinmalloc-pool", Metric: "ns_per_pair", Value: 30, Unit: "ns"},
		{Case: "pair/64KiB", Impl: "mimalloc", Metric: "error", Note: "pair: allocation failed"},
		{Case: "cuda-pair/4KiB", Impl: hostPoolName, Metric: "error", Note: noHostPools + " (device attribute 142 is 0)"},
		{Case: "uvm-prefetch", Impl: "uvm", Metric: "error", Note: "not measured on the fake driver: its cuMemPrefetchAsync moves no bytes"},
		{Case: "commit/locked", Impl: "pinmalloc", Metric: "error", Note: "skipped: RLIMIT_MEMLOCK below 1073741824 bytes"},
		{Case: "footprint/larson-low", Impl: "glibc", Metric: "error", Note: "the footprint's child process failed: glibc: exit status 2"},
	}
	got := failedCases(rs)
	if len(got) != 2 || got[0] != "mimalloc on pair/64KiB" ||
		got[1] != "glibc on footprint/larson-low" {
		t.Errorf("failedCases = %q, want the two failures (mimalloc on pair/64KiB, glibc on footprint/larson-low)", got)
	}
	if got := failedCases(rs[:1]); len(got) != 0 {
		t.Errorf("failedCases of a run without errors = %q, want none", got)
	}
}
