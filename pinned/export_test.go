package pinned

import "time"

// SetCloseWait sets how long Close waits for deferred buffers and returns the previous value.
func SetCloseWait(d time.Duration) time.Duration {
	old := closeWait
	closeWait = d
	return old
}

// StreamLists returns the number of streams the pool keeps state for.
func StreamLists(p *Pool) int {
	if p.order == nil {
		return 0
	}
	return p.order.lists.Streams()
}
