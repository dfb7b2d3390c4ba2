package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestUnmeasuredSaysWhy: a target left unmeasured by a competitor that did not run, or by an
// allocator that failed, says so, and is not counted with the targets whose cases the run left
// out; before, every one read "not measured in this run" and the summary line blamed -cases.
func TestUnmeasuredSaysWhy(t *testing.T) {
	ns := func(c, im string, v float64) result {
		return result{Case: c, Impl: im, Metric: "ns_per_pair", Value: v, Unit: "ns"}
	}
	rs := []result{
		// pair/16B ran without mimalloc (not found).
		ns("pair/16B", "pinmalloc-heap", 10), ns("pair/16B", "pinmalloc-pool", 20),
		ns("pair/16B", "go-syncpool", 25),
		// pair/64KiB ran, and the pool failed on it.
		ns("pair/64KiB", "go-syncpool", 25), ns("pair/64KiB", "percall-mlock", 40000),
		{Case: "pair/64KiB", Impl: "pinmalloc-pool", Metric: "error", Note: "pair: allocation failed"},
	}
	got := map[string]target{}
	for _, tg := range evaluateTargets(rs) {
		got[tg.Name] = tg
	}
	for name, want := range map[string]string{
		"heap-vs-mimalloc/16B":          "mimalloc did not run",
		"pool-vs-syncpool/64KiB":        "pinmalloc-pool failed on pair/64KiB: pair: allocation failed",
		"pool-vs-percall-mlock/64KiB":   "pinmalloc-pool failed on pair/64KiB",
		"heap-vs-mimalloc/64B":          "not measured in this run", // pair/64B did not run
		"heap-vs-mimalloc-adjusted/16B": "mimalloc did not run",
	} {
		tg := got[name]
		if tg.Status != unmeasured || !strings.Contains(tg.Detail, want) {
			t.Errorf("%s: %s (%s); want UNMEASURED saying %q", name, tg.Status, tg.Detail, want)
		}
	}
	var out bytes.Buffer
	printTargets(&out, evaluateTargets(rs))
	for _, want := range []string{"mimalloc did not run", "pinmalloc-pool failed on pair/64KiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the targets do not say %q:\n%s", want, out.String())
		}
	}
	for _, l := range strings.Split(out.String(), "\n") {
		notRun := strings.Contains(l, "their cases were not in this run")
		if notRun && strings.Contains(l, "heap-vs-mimalloc/16B") {
			t.Errorf("a target whose case ran is counted as not run: %s", l)
		}
	}
}

// TestFootprintUnmeasuredSaysWhy: a footprint target whose case ran but whose pool failed says
// so, and is not counted with the targets whose cases the run left out.
func TestFootprintUnmeasuredSaysWhy(t *testing.T) {
	rs := []result{
		{Case: "footprint/larson-low", Impl: "pinmalloc-pool", Metric: "error", Note: "allocation failed"},
		{Case: "footprint/larson-low", Impl: "glibc", Metric: "live_bytes", Value: 2 << 20},
	}
	for _, tg := range evaluateTargets(rs) {
		switch tg.Name {
		case "footprint-low-idle":
			want := "pinmalloc-pool failed on footprint/larson-low: allocation failed"
			if tg.Status != unmeasured || !strings.Contains(tg.Detail, want) {
				t.Errorf("%s: %s (%s); want UNMEASURED saying %q", tg.Name, tg.Status, tg.Detail, want)
			}
		case "footprint-high-idle":
			if tg.Detail != notMeasured {
				t.Errorf("%s, whose case did not run: %q", tg.Name, tg.Detail)
			}
		}
	}
}
