package uvm

import (
	"iter"
	"sync/atomic"
	"time"
)

// Acquire latency: successful Acquire, AcquireContext and AcquireHost calls are timed, from
// the call to the moment the tier lets go of its lock (lock wait included, the copy a restore
// queues not: Acquire does not wait for it), and counted in a fixed log-scale histogram under
// the lock the call already holds: reads of the monotonic clock (vDSO, no system call;
// time.Now would read the wall clock too), no allocation.
//
// A clock read costs tens of nanoseconds, two of them a good share of a hit's own cost (~77 ns
// per Acquire+Release pair measured on a 2-core VM), so hits are sampled: one Acquire in
// hitEvery reads the clock before taking the lock, and only those are timed when they hit.
// Every miss is timed: from the call when the call was sampled, otherwise from the moment the
// tier finds the block missing (the lock wait, which hits and misses share, is then left out;
// a miss's restore takes microseconds). AcquireHost, slow anyway, is always timed.
// Stats.AcquireLatency returns the counts; the metrics package exports them as a Prometheus
// histogram.

// hitEvery: one Acquire in hitEvery is timed from the call.
const hitEvery = 16

// acquireClock says which acquisitions are timed.
type acquireClock struct {
	// sample says the next Acquire reads the clock before taking the lock. It is read without
	// the lock, written under it only when it changes (an atomic store is dear on x86).
	sample atomic.Bool
	n      uint32        // acquisitions since the last sampled one (t.mu)
	every  uint32        // one in every is sampled: hitEvery, or 1 in tests (export_test.go)
	missAt time.Duration // when the current acquisition found its block missing (t.mu)
}

// latencyBounds are the buckets' upper bounds, Prometheus style (1, 2.5, 5 per decade), from
// 100 ns (a hit) to 1 s; a last bucket without bound (+Inf) counts the rest.
var latencyBounds = latencyBoundsArray[:]

// latencyBoundsArray holds latencyBounds; its length is checked against LatencyBuckets below.
var latencyBoundsArray = [...]time.Duration{
	100 * time.Nanosecond, 250 * time.Nanosecond, 500 * time.Nanosecond,
	1 * time.Microsecond, 2500 * time.Nanosecond, 5 * time.Microsecond,
	10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	1 * time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	1 * time.Second,
}

// LatencyBuckets is the number of buckets of a Latency: one per bound and one without bound.
const LatencyBuckets = 23

// A compile-time check that LatencyBuckets is one more than the bounds.
var _ = [1]struct{}{}[len(latencyBoundsArray)+1-LatencyBuckets]

// Latency is a histogram of durations in fixed log-scale buckets.
type Latency struct {
	// Bounds are the upper bounds of the buckets but the last, ascending; the slice is shared
	// by every Latency and must not be changed.
	Bounds []time.Duration
	// Counts[i] counts durations d with Bounds[i-1] < d <= Bounds[i] (not cumulative);
	// Counts[len(Bounds)] those above the last bound.
	Counts [LatencyBuckets]uint64
	// Count is the number of durations (the sum of Counts); Sum their total.
	Count uint64
	Sum   time.Duration
}

// AcquireLatency holds the latency histograms of the tier's acquisitions, successful ones only.
type AcquireLatency struct {
	// Hit times a sample of the Acquire calls that found the block on the device, one call in
	// 16 (Stats.Hits counts them all); Miss times every call that restored the block (queued
	// its copy back).
	Hit, Miss Latency
	// Host times AcquireHost calls, the copies they wait for included.
	Host Latency
}

// Outcomes yields each histogram with the name of its outcome: "hit", "miss", then "host".
func (a AcquireLatency) Outcomes() iter.Seq2[string, Latency] {
	return func(yield func(string, Latency) bool) {
		_ = yield("hit", a.Hit) && yield("miss", a.Miss) && yield("host", a.Host)
	}
}

// record counts one duration. t.mu is held.
func (l *Latency) record(d time.Duration) {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	l.Counts[i]++
	l.Count++
	l.Sum += d
}

// Device returns the histogram of every successful Acquire: Hit and Miss added.
func (a AcquireLatency) Device() Latency {
	l := a.Hit
	for i, n := range a.Miss.Counts {
		l.Counts[i] += n
	}
	l.Count += a.Miss.Count
	l.Sum += a.Miss.Sum
	l.Bounds = latencyBounds
	return l
}

// Quantile estimates the q-quantile (0 <= q <= 1) as Prometheus's histogram_quantile does:
// linearly within the bucket that holds it, from 0 for the first bucket; a quantile in the
// last bucket (no bound) is reported as the last bound. It is 0 when the histogram is empty.
func (l Latency) Quantile(q float64) time.Duration {
	if l.Count == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * float64(l.Count)
	var below uint64
	for i, n := range l.Counts {
		if n == 0 || float64(below+n) < rank {
			below += n
			continue
		}
		if i >= len(latencyBounds) {
			return latencyBounds[len(latencyBounds)-1]
		}
		lo := time.Duration(0)
		if i > 0 {
			lo = latencyBounds[i-1]
		}
		frac := (rank - float64(below)) / float64(n)
		return lo + time.Duration(frac*float64(latencyBounds[i]-lo))
	}
	return latencyBounds[len(latencyBounds)-1]
}

// clockBase is the origin of nanotime.
var clockBase = time.Now()

// nanotime reads the monotonic clock only (time.Since of a time.Time that has a monotonic
// reading does not read the wall clock).
func nanotime() time.Duration { return time.Since(clockBase) }

// acquireStart returns the time (a nanotime) of an Acquire that is sampled, 0 for one that is
// not (acquireClock).
func (t *Tier) acquireStart() time.Duration {
	if t.lat.sample.Load() {
		return nanotime()
	}
	return 0
}

// timeAcquire records an Acquire that succeeded, started at start (from acquireStart); missed
// says it restored the block. t.mu is held.
func (t *Tier) timeAcquire(start time.Duration, missed bool) {
	switch {
	case missed:
		if start == 0 {
			start = t.lat.missAt
		}
		t.st.AcquireLatency.Miss.record(nanotime() - start)
	case start != 0:
		t.st.AcquireLatency.Hit.record(nanotime() - start)
	}
	t.lat.n++
	next := t.lat.n >= t.lat.every
	if next {
		t.lat.n = 0
	}
	if next != t.lat.sample.Load() {
		t.lat.sample.Store(next)
	}
}

// withBounds sets the shared bounds of a's histograms, for Stats.
func (a *AcquireLatency) withBounds() {
	a.Hit.Bounds, a.Miss.Bounds, a.Host.Bounds = latencyBounds, latencyBounds, latencyBounds
}

// LatencyBounds returns a copy of the upper bounds of the buckets of every Latency (the last
// bucket, without bound, excepted).
func LatencyBounds() []time.Duration { return append([]time.Duration(nil), latencyBounds...) }
