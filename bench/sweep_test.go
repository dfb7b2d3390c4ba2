package main

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// TestSweepProcs checks the GOMAXPROCS values: doublings, then the CPU count.
func TestSweepProcs(t *testing.T) {
	for ncpu, want := range map[int][]int{1: {1}, 2: {1, 2}, 6: {1, 2, 4, 6}, 8: {1, 2, 4, 8}} {
		if got := sweepProcs(ncpu); !slices.Equal(got, want) {
			t.Errorf("%d CPUs: %v, want %v", ncpu, got, want)
		}
	}
}

// TestSweep runs the sweep at a tiny size and checks every GOMAXPROCS has its figures.
func TestSweep(t *testing.T) {
	s, locked := testSuite(t)
	if !locked {
		t.Skip("the pool's memory cannot be locked here")
	}
	rs := sweep(s)
	for _, r := range rs {
		if r.Metric == "error" {
			t.Fatalf("%s %s: %s", r.Case, r.Impl, r.Note)
		}
	}
	for _, p := range sweepProcs(runtime.NumCPU()) {
		c := fmt.Sprintf("gomaxprocs/%d", p)
		for _, m := range []struct{ impl, metric string }{{"pinmalloc-pool", "speedup"}, {"control", "speedup"}, {"pinmalloc-pool", "speedup_over_control"}} {
			if v, ok := lookup(rs, c, m.impl, m.metric); !ok || v <= 0 {
				t.Errorf("%s: %s %s = %g", c, m.impl, m.metric, v)
			}
		}
	}
}
