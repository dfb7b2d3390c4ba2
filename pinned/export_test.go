package pinned

import "time"

// SetCloseWait sets how long Close waits for deferred buffers and returns the previous value.
func SetCloseWait(d time.Duration) time.Duration {
	old := closeWait
	closeWait = d
	return old
}
