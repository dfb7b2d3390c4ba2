package main

import (
	"math"
	"testing"
)

// TestAdjusted checks the harness-adjusted figures and the ratios to mimalloc on made-up
// results: each allocator less its own null, nulls and mimalloc not compared with mimalloc,
// nothing adjusted where the null was not measured.
func TestAdjusted(t *testing.T) {
	ims := []impl{
		{name: "pinmalloc-heap", harness: "null-go"},
		{name: "mimalloc", harness: "null-c"},
		{name: "null-go", harness: "null-go"},
		{name: "null-c", harness: "null-c"},
	}
	ns := func(c, im string, v float64) result {
		return result{Case: c, Impl: im, Metric: "ns_per_pair", Value: v, Unit: "ns"}
	}
	rs := []result{
		ns("a", "pinmalloc-heap", 30), ns("a", "mimalloc", 12), ns("a", "null-go", 6), ns("a", "null-c", 2),
		ns("b", "pinmalloc-heap", 20), ns("b", "mimalloc", 10), // no nulls: raw ratio only
	}
	out := adjusted(rs, ims)
	want := map[[3]string]float64{
		{"a", "pinmalloc-heap", "ns_per_pair_adjusted"}: 24,
		{"a", "mimalloc", "ns_per_pair_adjusted"}:       10,
		{"a", "pinmalloc-heap", "vs_mimalloc"}:          2.5,
		{"a", "pinmalloc-heap", "vs_mimalloc_adjusted"}: 2.4,
		{"b", "pinmalloc-heap", "vs_mimalloc"}:          2,
	}
	if len(out) != len(want) {
		t.Errorf("%d results, want %d: %+v", len(out), len(want), out)
	}
	for k, v := range want {
		got, ok := lookup(out, k[0], k[1], k[2])
		if !ok || math.Abs(got-v) > 1e-9 {
			t.Errorf("%v = %g (found %v), want %g", k, got, ok, v)
		}
	}
}
