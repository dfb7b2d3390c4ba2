package uvm

import (
	"testing"
	"time"
)

// TestLatencyBuckets checks the bucket edges (a bound belongs to its bucket) and the quantile
// estimate, interpolated within the bucket as histogram_quantile does.
func TestLatencyBuckets(t *testing.T) {
	var l Latency
	for _, d := range []time.Duration{0, 100 * time.Nanosecond, 101 * time.Nanosecond, time.Second, 2 * time.Second} {
		l.record(d)
	}
	last := len(latencyBounds)
	want := map[int]uint64{0: 2, 1: 1, last - 1: 1, last: 1}
	for i, n := range l.Counts {
		if n != want[i] {
			t.Errorf("bucket %d (%v): %d, want %d", i, l.Counts, n, want[i])
		}
	}
	if l.Count != 5 || l.Sum != 3*time.Second+201*time.Nanosecond {
		t.Errorf("count %d, sum %v", l.Count, l.Sum)
	}

	var q Latency
	for i := 0; i < 10; i++ {
		q.record(2 * time.Microsecond) // bucket (1µs, 2.5µs]
	}
	for i := 0; i < 10; i++ {
		q.record(5 * time.Second) // no bound
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.25, 1750 * time.Nanosecond}, {0.5, 2500 * time.Nanosecond}, {0.99, time.Second}, {0, time.Microsecond}} {
		if got := q.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := (Latency{}).Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile = %v", got)
	}
}
