package main

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestInterleave checks the rounds: every contender is calibrated, then runs once a round in
// an order that turns by one each round; the figure is the median; a failure leaves the
// rounds and is reported.
func TestInterleave(t *testing.T) {
	cfg := &config{target: time.Millisecond, reps: 4}
	var order []int
	fixed := func(k int, ns []time.Duration) runner {
		return func(n int) (time.Duration, error) {
			if n >= 50000 { // a timed run: calibration runs are shorter (1 ms at 10 ns per op is 100000)
				order = append(order, k)
				return ns[len(order)%len(ns)] * time.Duration(n), nil
			}
			return time.Duration(n) * 10, nil
		}
	}
	boom := errors.New("boom")
	failing := func(n int) (time.Duration, error) {
		if n >= 50000 {
			return 0, boom
		}
		return time.Duration(n) * 10, nil
	}
	outs := interleave(cfg, []contender{
		{fixed(0, []time.Duration{10}), 1},
		{fixed(1, []time.Duration{20, 20, 20, 500}), 1},
		{failing, 1},
	})
	if outs[0].err != nil || outs[0].m.nsPerOp != 10 {
		t.Errorf("contender 0: %+v, want 10 ns per op", outs[0])
	}
	if outs[1].err != nil || outs[1].m.nsPerOp != 20 {
		t.Errorf("contender 1: %+v, want the median, 20 ns per op, whatever one round's 500", outs[1])
	}
	if !errors.Is(outs[2].err, boom) {
		t.Errorf("contender 2: %v, want its error", outs[2].err)
	}
	// Round r starts with contender r mod 3; the failed one drops out.
	if want := []int{0, 1, 1, 0, 0, 1, 0, 1}; !slices.Equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
}

// TestMedian checks odd and even counts.
func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median %v = %g, want %g", c.xs, got, c.want)
		}
	}
}
