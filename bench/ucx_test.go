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
