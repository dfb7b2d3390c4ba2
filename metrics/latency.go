package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pinmalloc/pinmalloc/uvm"
)

// Acquire latency: the tier's histograms (uvm.Stats.AcquireLatency) as Prometheus histograms,
// pinmalloc_uvm_acquire_seconds{name,outcome} for Acquire (outcome "hit": the block was on the
// device, sampled: 1 call in 16 is timed, so its _count is about a sixteenth of the hits, which
// pinmalloc_uvm_hits_total counts; "miss": it was restored, every one timed) and
// pinmalloc_uvm_acquire_host_seconds{name} for AcquireHost, in seconds, with uvm's fixed buckets
// (uvm.LatencyBounds).

// Histogram is a latency histogram of a tier, in seconds.
type Histogram struct {
	// Outcome is "hit" or "miss" for Acquire, "host" for AcquireHost.
	Outcome string `json:"outcome"`
	// Buckets[i] counts the calls that took at most UpperBounds[i] seconds (cumulative, as
	// Prometheus's le buckets); Count counts them all (the +Inf bucket), Sum their seconds.
	UpperBounds []float64 `json:"upper_bounds"`
	Buckets     []uint64  `json:"buckets"`
	Count       uint64    `json:"count"`
	Sum         float64   `json:"sum"`
}

// latencyUpperBounds are uvm's bucket bounds in seconds, shared by every Histogram.
var latencyUpperBounds = func() []float64 {
	var s []float64
	for _, b := range uvm.LatencyBounds() {
		s = append(s, b.Seconds())
	}
	return s
}()

// fromLatency converts one of a tier's histograms.
func fromLatency(outcome string, l uvm.Latency) Histogram {
	h := Histogram{Outcome: outcome, UpperBounds: latencyUpperBounds, Buckets: make([]uint64, len(latencyUpperBounds)),
		Count: l.Count, Sum: l.Sum.Seconds()}
	var n uint64
	for i := range h.Buckets {
		n += l.Counts[i]
		h.Buckets[i] = n
	}
	return h
}

// acquireHistograms converts a tier's latency histograms: hit, miss and host.
func acquireHistograms(a uvm.AcquireLatency) []Histogram {
	hs := make([]Histogram, 0, 3)
	for outcome, l := range a.Outcomes() {
		hs = append(hs, fromLatency(outcome, l))
	}
	return hs
}

var (
	acquireSecondsDesc = prometheus.NewDesc("pinmalloc_uvm_acquire_seconds",
		"Time successful Acquire calls took, by outcome: hit (the block was on the device; 1 call in 16 is timed, so the hit _count is about a sixteenth of pinmalloc_uvm_hits_total) or miss (it was restored; every one timed).",
		[]string{"name", "outcome"}, nil)
	acquireHostSecondsDesc = prometheus.NewDesc("pinmalloc_uvm_acquire_host_seconds",
		"Time successful AcquireHost calls took, the copies they waited for included.", nameLabel, nil)
)

// collectLatency sends the latency histograms of the tier called name.
func collectLatency(ch chan<- prometheus.Metric, name string, hs []Histogram) {
	for _, h := range hs {
		desc, labels := acquireSecondsDesc, []string{name, h.Outcome}
		if h.Outcome == "host" {
			desc, labels = acquireHostSecondsDesc, []string{name}
		}
		buckets := make(map[float64]uint64, len(h.UpperBounds))
		for i, b := range h.UpperBounds {
			buckets[b] = h.Buckets[i]
		}
		m, err := prometheus.NewConstHistogram(desc, h.Count, h.Sum, buckets, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(desc, fmt.Errorf("%w: labels %q: %w", ErrInvalidName, labels, err))
		}
		ch <- m
	}
}
