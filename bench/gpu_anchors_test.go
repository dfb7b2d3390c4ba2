//go:build cgo && linux

package main

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestSetupRoundsInterleaved: the set-up case (precommit-vs-hostpool-setup) times its
// competitors in rounds, each round every one of them once, in a turning order, never all of
// one's runs and then all of the next's; each figure is the median of its rounds, with their
// spread (round_spread: the slowest over the fastest of three), and one that fails records its
// error.
func TestSetupRoundsInterleaved(t *testing.T) {
	var order []string
	entrant := func(name string, ms []int, fail int) setupEntrant {
		n := 0
		return setupEntrant{name, func() (time.Duration, error) {
			order = append(order, name)
			n++
			if n == fail {
				return 0, errors.New("refused")
			}
			return time.Duration(ms[n-1]) * time.Millisecond, nil
		}}
	}
	rs := setupRounds("cuda-setup/1GiB", []setupEntrant{
		entrant("a", []int{9, 1, 5}, 0),
		entrant("b", []int{2, 8, 4}, 0),
		entrant("c", []int{7, 7}, 3),
	}, 3)
	if got, want := fmt.Sprint(order), "[a b c b c a c a b]"; got != want {
		t.Errorf("runs in the order %s, want %s (rounds, their order turning)", got, want)
	}
	want := map[string]float64{"a": 5, "b": 4}
	spread := map[string]float64{"a": 9, "b": 4}
	for _, r := range rs {
		switch {
		case r.Metric == "round_spread" && r.Value != spread[r.Impl]:
			t.Errorf("%s round_spread %g, want %g", r.Impl, r.Value, spread[r.Impl])
		case r.Metric == "round_spread":
			delete(spread, r.Impl)
		case r.Metric == "setup_ms" && r.Value != want[r.Impl]:
			t.Errorf("%s setup_ms %g, want the median %g", r.Impl, r.Value, want[r.Impl])
		case r.Metric == "setup_ms":
			delete(want, r.Impl)
		case r.Metric == "error" && r.Impl == "c":
			delete(want, "c-error")
		default:
			t.Errorf("unexpected %+v", r)
		}
	}
	if len(want) != 0 || len(spread) != 0 {
		t.Errorf("missing figures: %v, spreads: %v", want, spread)
	}
	if _, failed := failure(rs, "cuda-setup/1GiB", "c"); !failed {
		t.Error("c's failure not recorded")
	}
	if _, ok := lookup(rs, "cuda-setup/1GiB", "c", "setup_ms"); ok {
		t.Error("c, which failed, has a figure")
	}
}
