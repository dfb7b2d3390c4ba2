package main

import (
	"slices"
	"time"
)

// latencies records durations and gives their quantiles (exactly: the run records a few
// thousand).
type latencies struct{ d []time.Duration }

func (l *latencies) record(d time.Duration) { l.d = append(l.d, d) }

func (l *latencies) reset() { l.d = l.d[:0] }

// quantile returns the duration at or below which a fraction q (0…1) of those recorded lie, 0
// when none was recorded.
func (l *latencies) quantile(q float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	i := min(max(int(q*float64(len(l.d))+0.5)-1, 0), len(l.d)-1)
	return l.d[i]
}

// max returns the longest duration recorded.
func (l *latencies) max() time.Duration { return l.quantile(1) }
