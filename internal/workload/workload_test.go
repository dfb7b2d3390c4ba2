package workload

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestStreamingWraps(t *testing.T) {
	g, err := NewStreaming(3)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for range 7 {
		got = append(got, g.Next())
	}
	if want := []int{0, 1, 2, 0, 1, 2, 0}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestSeeded: the same seed gives the same sequence, another seed another one, for the
// patterns that draw random numbers.
func TestSeeded(t *testing.T) {
	for _, p := range []Pattern{Random, Zipf} {
		seq := func(seed uint64) []int {
			g, err := New(p, 1000, seed)
			if err != nil {
				t.Fatal(err)
			}
			out := make([]int, 200)
			for i := range out {
				out[i] = g.Next()
			}
			return out
		}
		if a, b := seq(1), seq(1); !slices.Equal(a, b) {
			t.Errorf("%v: seed 1 gave two sequences", p)
		}
		if a, b := seq(1), seq(2); slices.Equal(a, b) {
			t.Errorf("%v: seeds 1 and 2 gave the same sequence", p)
		}
	}
}

// TestRandomUniform: every block is drawn about as often as the others (chi-square well below
// what a 5-sigma deviation would give).
func TestRandomUniform(t *testing.T) {
	const n, draws = 64, 64 * 2000
	g, _ := NewRandom(n, 7)
	counts := make([]int, n)
	for range draws {
		counts[g.Next()]++
	}
	exp := float64(draws) / n
	chi := 0.0
	for _, c := range counts {
		chi += (float64(c) - exp) * (float64(c) - exp) / exp
	}
	// chi-square with 63 degrees of freedom: mean 63, sd ~11.2
	if chi > 63+5*11.2 {
		t.Fatalf("chi-square %.1f: not uniform: %v", chi, counts)
	}
}

// TestZipfShape: the block of rank k is drawn with a frequency close to the Zipf law, the
// ranks are a permutation of the blocks, and every draw is in range.
func TestZipfShape(t *testing.T) {
	const n, draws, s = 1000, 400000, 1.1
	g, err := NewZipf(n, s, 3)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, n)
	for k := range n {
		b := g.Block(k)
		if seen[b] {
			t.Fatalf("block %d has two ranks", b)
		}
		seen[b] = true
	}
	counts := make([]int, n)
	for range draws {
		b := g.Next()
		if b < 0 || b >= n {
			t.Fatalf("block %d out of range", b)
		}
		counts[b]++
	}
	h := 0.0
	for k := 1; k <= n; k++ {
		h += math.Pow(float64(k), -s)
	}
	for _, k := range []int{0, 1, 9} {
		want := float64(draws) * math.Pow(float64(k+1), -s) / h
		if got := float64(counts[g.Block(k)]); math.Abs(got-want) > 0.05*want {
			t.Errorf("rank %d: drawn %v times, the law says %.0f", k, got, want)
		}
	}
	if counts[g.Block(0)] <= counts[g.Block(1)] || counts[g.Block(1)] <= counts[g.Block(50)] {
		t.Error("popularity does not fall with rank")
	}
}

func TestBadArguments(t *testing.T) {
	for _, f := range []func() error{
		func() error { _, err := NewStreaming(0); return err },
		func() error { _, err := NewRandom(-1, 1); return err },
		func() error { _, err := NewZipf(10, 1, 1); return err },
		func() error { _, err := NewZipf(10, math.NaN(), 1); return err },
		func() error { _, err := New(Pattern(9), 10, 1); return err },
		func() error { _, err := ParsePattern("lru"); return err },
	} {
		if err := f(); !errors.Is(err, ErrInvalid) {
			t.Errorf("got %v, want ErrInvalid", err)
		}
	}
	for _, p := range Patterns {
		if q, err := ParsePattern(p.String()); err != nil || q != p {
			t.Errorf("ParsePattern(%q) = %v, %v", p, q, err)
		}
	}
}

func TestNextDoesNotAllocate(t *testing.T) {
	for _, p := range Patterns {
		g, _ := New(p, 100, 1)
		if a := testing.AllocsPerRun(1000, func() { g.Next() }); a != 0 {
			t.Errorf("%v: %v allocations per Next", p, a)
		}
	}
}

// TestBuckets: every value lies within its bucket's bounds, buckets are contiguous and a
// bucket is at most 1/16 of its lower bound wide.
func TestBuckets(t *testing.T) {
	prevHi := uint64(0)
	for b := range histBuckets {
		lo, hi := bounds(b)
		if b > 0 && lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, the previous ended at %d", b, lo, prevHi)
		}
		if lo >= subBuckets && float64(hi-lo+1) > float64(lo)/subBuckets {
			t.Fatalf("bucket %d [%d, %d] too wide", b, lo, hi)
		}
		for _, v := range []uint64{lo, hi, lo + (hi-lo)/2} {
			if bucket(v) != b {
				t.Fatalf("value %d in bucket %d, not %d", v, bucket(v), b)
			}
		}
		prevHi = hi
		if hi == math.MaxUint64 {
			if b != histBuckets-1 {
				t.Fatalf("bucket %d reaches the top but is not the last", b)
			}
			break
		}
	}
}

// TestQuantiles compares the histogram's quantiles with the exact ones of a log-normal sample.
func TestQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	vals := make([]float64, 100000)
	for i := range vals {
		v := math.Exp(6 + 1.5*r.NormFloat64()) // ns: a few hundred, a long tail
		vals[i] = math.Floor(v)
		h.Record(time.Duration(vals[i]))
	}
	slices.Sort(vals)
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
		exact := vals[max(0, int(math.Ceil(q*float64(len(vals))))-1)]
		got := float64(h.Quantile(q))
		if got < exact || got > exact*(1+1.0/subBuckets)+1 {
			t.Errorf("q=%v: %v, exact %v", q, got, exact)
		}
	}
	if h.Count() != uint64(len(vals)) || h.Max() != time.Duration(vals[len(vals)-1]) {
		t.Errorf("count %d max %v", h.Count(), h.Max())
	}
	var a, b Histogram
	for i, v := range vals {
		if i%2 == 0 {
			a.Record(time.Duration(v))
		} else {
			b.Record(time.Duration(v))
		}
	}
	a.Merge(&b)
	if a.Quantile(0.99) != h.Quantile(0.99) || a.Mean() != h.Mean() || a.Count() != h.Count() {
		t.Errorf("merged: p99 %v mean %v, whole: p99 %v mean %v", a.Quantile(0.99), a.Mean(), h.Quantile(0.99), h.Mean())
	}
	a.Reset()
	if a.Count() != 0 || a.Quantile(0.5) != 0 || a.Mean() != 0 {
		t.Error("Reset left counts")
	}
	if al := testing.AllocsPerRun(1000, func() { h.Record(123) }); al != 0 {
		t.Errorf("%v allocations per Record", al)
	}
}

// TestMeanOfHugeDurations: the mean of durations whose sum passes what 64 bits hold (three
// time.Duration maxima, in one histogram or merged from two) is still their mean, not that of
// a sum wrapped past 2^64.
func TestMeanOfHugeDurations(t *testing.T) {
	const top = time.Duration(math.MaxInt64)
	var h, a, b Histogram
	for range 3 {
		h.Record(top)
		a.Record(top)
		b.Record(top)
	}
	h.Record(top - 3)
	if got, want := h.Mean(), top-1; got != want {
		t.Errorf("mean of three maxima and max-3: %v, want %v", got, want)
	}
	a.Merge(&b)
	if got := a.Mean(); got != top {
		t.Errorf("mean of six maxima, merged: %v, want %v", got, top)
	}
	// Merged into itself until the count wraps past 2^64: the mean is lost, but Mean does not
	// panic (Div64 does when the sum's high word is not below the count).
	var g Histogram
	for range 3 { // an odd count, which doubling takes to 2^63 before 0
		g.Record(top)
	}
	for range 64 {
		g.Merge(&g)
		_ = g.Mean()
	}
}

// TestQuantileRank: Quantile(q) is a duration at or below which at least a fraction q of the
// recorded ones lie, the ceil(q·n)-th smallest (nearest rank): with 1 to 10 ns (each its own
// bucket), q=0.91 is 10 ns, not the 9 ns under which only 0.9 lie; and q·n that floating point
// puts a hair above a whole number (0.07·100) is still that rank.
func TestQuantileRank(t *testing.T) {
	var h Histogram
	for v := range 10 {
		h.Record(time.Duration(v + 1))
	}
	for q, want := range map[float64]time.Duration{
		0: 1, 0.05: 1, 0.1: 1, 0.11: 2, 0.5: 5, 0.51: 6, 0.9: 9, 0.91: 10, 0.99: 10, 1: 10,
	} {
		if got := h.Quantile(q); got != want {
			t.Errorf("Quantile(%v) of 1…10 ns = %v, want %v", q, got, want)
		}
	}
	var c Histogram
	for v := range 100 {
		c.Record(time.Duration(v + 1))
	}
	for q, want := range map[float64]time.Duration{0.07: 7, 0.29: 29, 0.57: 57, 0.994: 100} {
		if got := c.Quantile(q); got != want {
			t.Errorf("Quantile(%v) of 1…100 ns = %v, want %v", q, got, want)
		}
	}
}
