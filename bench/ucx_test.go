package main

import (
	"slices"
	"testing"
)

// TestUCXRowRatios: a row's ratio is taken round by round, remote against the competitor
// measured next to it, and its medians leave the rounds in the order taken (median sorts what
// it is given: taken on the rounds themselves, it paired remote's fastest round with the
// competitor's fastest).
func TestUCXRowRatios(t *testing.T) {
	ours := []float64{100, 300, 200}
	other := []float64{400, 100, 200}
	var r ucxRow
	r.compare(ours, nil, other)
	r.like(ours, []float64{50, 150, 100})
	if want := []float64{0.25, 3, 1}; !slices.Equal(r.Rounds.Ratio, want) {
		t.Errorf("ratios %v, want %v", r.Rounds.Ratio, want)
	}
	if !slices.Equal(r.Rounds.Remote, []float64{100, 300, 200}) || !slices.Equal(ours, []float64{100, 300, 200}) {
		t.Errorf("rounds reordered: %v, %v", r.Rounds.Remote, ours)
	}
	if r.Remote != 200 || r.Other != 200 || r.Ratio != 1 || r.Like != 100 || r.LikeR != 2 {
		t.Errorf("medians %+v", r)
	}
	if got := spread(r.Rounds.Ratio, 2); got != "0.25–3.00" {
		t.Errorf("spread %q", got)
	}
}

// TestUCXRowOnCPU: remote's rounds' time on a CPU goes into the row's rounds and its detail,
// in percent.
func TestUCXRowOnCPU(t *testing.T) {
	r := ucxRow{Detail: "vs perftest"}
	r.onCPU([]float64{1, 0.27, 0.995})
	if !slices.Equal(r.Rounds.OnCPU, []float64{1, 0.27, 0.995}) {
		t.Errorf("rounds %v", r.Rounds.OnCPU)
	}
	if want := "vs perftest; remote's thread on a CPU 27–100% of its rounds' time"; r.Detail != want {
		t.Errorf("detail %q, want %q", r.Detail, want)
	}
}

// TestPerftestFinal reads ucx_perftest's final line, and one whose averages are inf (a round
// whose last report came at once: the bench stopped on it).
func TestPerftestFinal(t *testing.T) {
	for line, want := range map[string]string{
		"                        1024     1.638     1.700     1.652     36862.11   37790.53      589794     604649":  "37790.53",
		"                          64    110.904       inf 32907.531        0.00      30.39           0          30": "30.39",
	} {
		m := perftestFinal.FindStringSubmatch(line)
		if m == nil || m[6] != want {
			t.Errorf("%q: %q, want overall bandwidth %s", line, m, want)
		}
	}
}
