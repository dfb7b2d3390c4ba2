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

// SetReleaseHook sets the function a last Release with a deferred free to make runs just
// before that free (nil: none), and returns the previous one.
func SetReleaseHook(f func()) func() {
	old := releaseHook
	releaseHook = f
	return old
}
