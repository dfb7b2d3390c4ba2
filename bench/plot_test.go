package main

import (
	"fmt"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
)

// TestPlotTicksHaveUnits: byte and duration axes are labelled with units, never 1e+06.
func TestPlotTicksHaveUnits(t *testing.T) {
	var labels []string
	for _, tk := range (byteTicks{}).Ticks(16, 256<<20) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got := strings.Join(labels, ","); got != "16 B,256 B,4 KiB,64 KiB,1 MiB,16 MiB,256 MiB" {
		t.Errorf("byte labels %s", got)
	}
	labels = labels[:0]
	for _, tk := range (nsTicks{}).Ticks(5, 2e10) {
		labels = append(labels, tk.Label)
	}
	if got := strings.Join(labels, ","); got != "10 ns,100 ns,1 µs,10 µs,100 µs,1 ms,10 ms,100 ms,1 s,10 s" {
		t.Errorf("duration labels %s", got)
	}
}

// TestHitRatePlotKeepsZeros: a series whose hit rate is 0 beyond 1x keeps all its points (it
// used to vanish: zeros were dropped, leaving one point and no line).
func TestHitRatePlotKeepsZeros(t *testing.T) {
	s := &suite{}
	for _, f := range uvmFactors {
		v := 0.0
		if f == 1 {
			v = 1
		}
		c := fmt.Sprintf("uvm-oversub/%s/%s/%gx", wlPatternNames()[0], uvmRows()[0].name, f)
		s.results = append(s.results, result{Case: c, Impl: uvmRows()[0].impl, Metric: "hit_rate", Value: v})
	}
	lines, _ := uvmFactorSeries(s, "hit_rate", false)
	if len(lines) != 2 || lines[1].(plotter.XYs).Len() != len(uvmFactors) {
		t.Fatalf("series %v, want one of %d points (one per factor, zeros included)", lines, len(uvmFactors))
	}
	if p, err := uvmHitPlot(s); err != nil || p == nil {
		t.Fatalf("uvmHitPlot: %v, %v", p, err)
	}
}

// TestPlainTicks: linear axes read 750, not 750.00.
func TestPlainTicks(t *testing.T) {
	for _, tk := range (plainTicks{}).Ticks(0, 800) {
		if strings.Contains(tk.Label, ".") {
			t.Errorf("tick %q", tk.Label)
		}
	}
	for v, want := range map[float64]string{750: "750", 0.25: "0.25", 2.5e9: "2.5e+09", 0: "0"} {
		if got := plainNumber(v); got != want {
			t.Errorf("plainNumber(%g) = %q, want %q", v, got, want)
		}
	}
}
