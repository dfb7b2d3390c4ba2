package metrics

import "sync"

// carry keeps the counters of a source given to AddFunc from going down. Prometheus counters
// do not decrease, except at a reset, which a query's rate() takes for a count from 0 again:
// a function's counter that drops (a part of what it sums replaced, a count of its own
// started again) would be read as the whole of its new figure counted at once. carry exports
// instead the function's figure plus every drop it has made, so the series counts on from its
// highest figure and every increase the function shows after a drop is counted.
//
// Scrapes may run at once and apply their reads in another order than they made them: a read
// older than the one a family last applied is stale, not a drop, and exports that family's
// figure as it stands (begin numbers the reads).
type carry struct {
	mu    sync.Mutex
	reads uint64    // the reads of the function begun
	seen  []uint64  // the read each family's last figure is from
	last  []float64 // the function's figure at the last scrape, by family
	drop  []float64 // the sum of its drops, by family
}

// begin numbers the read of the function about to be made: a later read, a higher number.
func (c *carry) begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.reads
}

// counter returns what to export for the counter of family i whose figure is v at read.
func (c *carry) counter(read uint64, i int, v float64) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i >= len(c.last) {
		c.seen = append(c.seen, make([]uint64, i+1-len(c.seen))...)
		c.last = append(c.last, make([]float64, i+1-len(c.last))...)
		c.drop = append(c.drop, make([]float64, i+1-len(c.drop))...)
	}
	if read < c.seen[i] { // overtaken by a later read
		return c.last[i] + c.drop[i]
	}
	if v < c.last[i] {
		c.drop[i] += c.last[i] - v
	}
	c.seen[i], c.last[i] = read, v
	return v + c.drop[i]
}
