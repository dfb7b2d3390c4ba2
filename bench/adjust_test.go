package main

import (
	"math"
	"strings"
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

// TestAdjustedRatioUnmeasurable: where the null loop costs as much as the allocator or more,
// the harness-adjusted figure is zero or less and its ratio to mimalloc means nothing: the
// table says "unmeasurable" where it printed a ratio of zero or less, the result says why, and
// a target's detail does the same.
func TestAdjustedRatioUnmeasurable(t *testing.T) {
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
		// The heap below its null: adjusted -1 ns.
		ns("pair/16B", "pinmalloc-heap", 5), ns("pair/16B", "mimalloc", 6), ns("pair/16B", "null-go", 6), ns("pair/16B", "null-c", 2),
		// mimalloc at its null: adjusted 0 ns.
		ns("pair/64B", "pinmalloc-heap", 9), ns("pair/64B", "mimalloc", 2), ns("pair/64B", "null-go", 6), ns("pair/64B", "null-c", 2),
	}
	rs = append(rs, adjusted(rs, ims)...)
	for _, c := range []string{"pair/16B", "pair/64B"} {
		r, ok := find(rs, c, "pinmalloc-heap", "vs_mimalloc_adjusted")
		if !ok || r.Value != 0 || !strings.Contains(r.Note, "unmeasurable") {
			t.Errorf("%s: vs_mimalloc_adjusted %+v (found %v), want 0 with a note saying unmeasurable", c, r, ok)
		}
	}
	var b strings.Builder
	printAdjustedTable(&b, rs, "t", ims, []benchCase{{name: "pair/16B", group: "pair"}, {name: "pair/64B", group: "pair"}})
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, "| pair/") {
			continue
		}
		cells := strings.Split(line, " | ")
		if adj := strings.TrimSuffix(cells[len(cells)-1], " |"); adj != "unmeasurable" {
			t.Errorf("adjusted ratio cell %q, want unmeasurable:\n%s", adj, line)
		}
	}
	for _, tg := range evaluateTargets(rs) {
		if strings.HasPrefix(tg.Name, "heap-vs-mimalloc") && strings.Contains(tg.Detail, "harness-adjusted -") {
			t.Errorf("%s: detail %q shows a negative ratio", tg.Name, tg.Detail)
		}
		if tg.Name == "heap-vs-mimalloc-adjusted/16B" && tg.Status != unmeasured {
			t.Errorf("%s graded on an adjusted figure below zero: %s, want %s", tg.Name, tg.Status, unmeasured)
		}
	}
}

// TestFmtRatio: a ratio that is no measurement (zero or less, or not finite) is written
// "unmeasurable"; a target's detail writes the others with an x, as the rest of it. A small
// ratio keeps its significant digits: 0.004×, not 0.00×.
func TestFmtRatio(t *testing.T) {
	for v, want := range map[float64]string{1.234: "1.23×", 0: "unmeasurable", -0.5: "unmeasurable",
		math.Inf(1): "unmeasurable", math.NaN(): "unmeasurable", 0.1: "0.10×", 0.0456: "0.046×",
		0.004: "0.004×", 0.00421: "0.0042×", 0.001: "0.001×", 0.00099: "<0.001×", 1e-9: "<0.001×"} {
		if got := fmtRatio(v, "×"); got != want {
			t.Errorf("fmtRatio(%g) = %q, want %q", v, got, want)
		}
	}
	rs := []result{{Case: "pair/16B", Impl: "pinmalloc-heap", Metric: "ns_per_pair", Value: 20},
		{Case: "pair/16B", Impl: "mimalloc", Metric: "ns_per_pair", Value: 10},
		{Case: "pair/16B", Impl: "pinmalloc-heap", Metric: "vs_mimalloc_adjusted", Value: 2.5}}
	for _, tg := range evaluateTargets(rs) {
		if tg.Name == "heap-vs-mimalloc/16B" && !strings.HasSuffix(tg.Detail, "harness-adjusted 2.50x") {
			t.Errorf("%s: detail %q, want it to end harness-adjusted 2.50x", tg.Name, tg.Detail)
		}
	}
}
