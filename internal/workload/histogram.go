package workload

import (
	"math"
	"math/bits"
	"time"
)

// Histogram counts durations in log-linear buckets: exact below 16 ns, then 16 buckets per
// power of two, so a quantile is within 1/16 (6.25 %) of the true value. Record makes no heap
// allocation and takes constant time; the zero value is ready to use. A Histogram is not safe
// for concurrent use: give each goroutine its own and Merge them.
type Histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      [2]uint64 // ns, 128 bits (high, low): 2^64 holds only two time.Duration maxima
	min, max uint64    // ns; min is meaningful only when n > 0
}

const (
	subBits     = 4
	subBuckets  = 1 << subBits
	histBuckets = (64 - subBits + 1) * subBuckets
)

// bucket returns the bucket of v ns.
func bucket(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - 1 // v in [2^e, 2^(e+1)), e >= subBits
	sub := (v >> (e - subBits)) & (subBuckets - 1)
	return (e-subBits+1)*subBuckets + int(sub)
}

// bounds returns the smallest and largest value of bucket b.
func bounds(b int) (lo, hi uint64) {
	if b < subBuckets {
		return uint64(b), uint64(b)
	}
	e := b/subBuckets + subBits - 1
	width := uint64(1) << (e - subBits)
	lo = (subBuckets + uint64(b%subBuckets)) * width
	return lo, lo + width - 1
}

// Record counts one duration (a negative one counts as zero).
func (h *Histogram) Record(d time.Duration) {
	v := uint64(max(d, 0))
	h.counts[bucket(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
	h.add(0, v)
}

// add adds the 128-bit hi:lo ns to the sum. It cannot carry out of 128 bits while the count
// does not wrap: each value is below 2^63, so the sum stays below n·2^63.
func (h *Histogram) add(hi, lo uint64) {
	var c uint64
	h.sum[1], c = bits.Add64(h.sum[1], lo, 0)
	h.sum[0] += hi + c
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() uint64 { return h.n }

// Mean returns the mean duration, or 0 when nothing was recorded.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	// The high word is below n (the sum is below n·2^63), so the quotient fits 64 bits (and,
	// at most the largest value, a Duration); unless the count wrapped past 2^64 (a histogram
	// merged into itself 64 times), where the mean is lost and Div64 would panic.
	if h.sum[0] >= h.n {
		return time.Duration(h.max)
	}
	q, _ := bits.Div64(h.sum[0], h.sum[1], h.n)
	return time.Duration(q)
}

// Max returns the largest duration recorded.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Quantile returns the duration below or at which at least a fraction q (0…1) of the recorded
// ones lie (the nearest-rank quantile): the upper end of the bucket holding that rank, clamped
// to the smallest and largest value recorded. It returns 0 when nothing was recorded.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	// The rank-th smallest value, 1-based: ceil(q·n), the nearest rank, so that at least a
	// fraction q lie at or below it. q·n a relative 1e-12 above a whole number is that number:
	// floating point's error, as in 0.07·100 = 7.000000000000001.
	x := min(max(q, 0), 1) * float64(h.n)
	rank := uint64(math.Ceil(x - x*1e-12))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for b, c := range h.counts {
		if seen += c; seen >= rank {
			_, hi := bounds(b)
			return time.Duration(min(max(hi, h.min), h.max))
		}
	}
	return time.Duration(h.max)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for b, c := range o.counts {
		h.counts[b] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.add(o.sum[0], o.sum[1])
}

// Reset forgets everything recorded.
func (h *Histogram) Reset() { *h = Histogram{} }
