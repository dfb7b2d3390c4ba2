package main

import (
	"fmt"
	"slices"
	"strings"
)

// A figure taken in rounds (interleave) is the median of its rounds; its spread is how far the
// middle half of them disagree: the round a quarter from the slowest over the round a quarter
// from the fastest. On a quiet machine it is a percent or two; under load it can reach 2x, and
// a target graded on such figures says NOISY instead of MET or MISSED.

// roundSpread is the spread of a figure's rounds (ns per operation each), 0 for fewer than 3.
func roundSpread(rounds []float64) float64 {
	if len(rounds) < 3 {
		return 0
	}
	xs := slices.Clone(rounds)
	slices.Sort(xs)
	lo, hi := xs[len(xs)/4], xs[len(xs)-1-len(xs)/4]
	if lo <= 0 {
		return 0
	}
	return hi / lo
}

// judgeNoise attaches to t the spread of the figures it was computed from (used: case and
// allocator; adj: those of them it took harness-adjusted, whose spread is the adjusted
// figure's, adjust.go) and, where the ratio could lie on the other side of the limit within
// that spread, makes it NOISY: the run cannot grade it.
func judgeNoise(t target, rs []result, used, adj map[[2]string]bool) target {
	s := 1.0
	timed := false
	for k := range used {
		metric := "round_spread"
		if adj[k] {
			metric = "round_spread_adjusted"
		}
		if v, ok := lookup(rs, k[0], k[1], metric); ok && v >= 1 {
			s *= v
			timed = true
		}
	}
	if !timed || (t.Status != met && t.Status != missed) {
		return t
	}
	t.Spread = s
	if t.Ratio > 0 && t.Limit > 0 && t.Ratio/s <= t.Limit && t.Limit <= t.Ratio*s {
		by := fmt.Sprintf("by %.2fx", s)
		if s >= maxSpread { // a harness-adjusted figure's, at least (adjustedSpread)
			by = "without bound (an adjusted figure they could put at zero or below)"
		}
		t.Detail = fmt.Sprintf("too noisy to grade: it reads %s by %.2fx, but its rounds disagree %s; "+
			"retake on a quiet machine; %s", strings.ToLower(t.Status), margin(t), by, t.Detail)
		t.Status = noisy
	}
	return t
}

// noiseOf is judgeNoise for a target built outside evaluateTargets from the figures of keys
// (case and allocator), taken raw: the GPU suites' ratios of timings taken in rounds.
func noiseOf(rs []result, t target, keys ...[2]string) target {
	used := map[[2]string]bool{}
	for _, k := range keys {
		used[k] = true
	}
	return judgeNoise(t, rs, used, nil)
}

// margin is how far a ratio lies from its limit, as a factor of at least 1.
func margin(t target) float64 {
	if t.Ratio > t.Limit {
		return t.Ratio / t.Limit
	}
	return t.Limit / t.Ratio
}

// bytesTargets are the targets of memory sizes, not times: the load does not move them.
var bytesTargets = []string{"trace-peak-vs-go-heap", "trace-committed-over-live", "huge-up-to-capacity", "footprint-low-idle",
	"footprint-high-idle", "footprint-trace-cudahost", "footprint-trace-cudahost-16p", "footprint-trace-cudahost-vs-locked"}

// missedWhy says, for a MISSED target, why it reads so and whether that matters on this
// machine: out of reach here, a real gap its rounds agree on, a size the load does not move,
// or a timing with nothing to tell its noise by.
func missedWhy(t target) string {
	switch {
	case t.Unreachable != "":
		return "cannot be met on this machine: " + t.Unreachable
	case t.Spread > 0:
		return fmt.Sprintf("it matters here: off by %.2fx, while its rounds agree within %.2fx, so the gap is the code's, not the load's",
			margin(t), t.Spread)
	case slices.Contains(bytesTargets, t.Name):
		return fmt.Sprintf("it matters here and anywhere: off by %.2fx in bytes held, which the machine's load does not change", margin(t))
	default:
		return fmt.Sprintf("off by %.2fx on figures taken without rounds to compare, so the load's share is unknown: retake on a quiet machine before reading it as the code's", margin(t))
	}
}
