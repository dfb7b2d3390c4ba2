package metrics

import "sync"

// carry keeps the counters of a source given to AddFunc from going down. Prometheus counters
// do not decrease, except at a reset, which a query's rate() takes for a count from 0 again:
// a function's counter that drops (a part of what it sums replaced, a count of its own
// started again) would be read as the whole of its new figure counted at once. carry exports
// instead the function's figure plus every drop it has made, so the series counts on from its
// highest figure and every increase the function shows after a drop is counted.
type carry struct {
	mu   sync.Mutex
	last []float64 // the function's figure at the last scrape, by family
	drop []float64 // the sum of its drops, by family
}

// counter returns what to export for the counter of family i whose figure is now v.
func (c *carry) counter(i int, v float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i >= len(c.last) {
		c.last = append(c.last, make([]float64, i+1-len(c.last))...)
		c.drop = append(c.drop, make([]float64, i+1-len(c.drop))...)
	}
	if v < c.last[i] {
		c.drop[i] += c.last[i] - v
	}
	c.last[i] = v
	return v + c.drop[i]
}
