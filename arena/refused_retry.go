package arena

import "time"

// # Retrying refused releases
//
// The purge timer releases the refused regions again at each tick. It ticks at the purge's pace
// (every half delay) only while other memory waits for it; when only refused regions are left,
// it is armed for them alone (a.retryArmed, with a.clock.Armed false so that an Idle or a
// markUnwanted starts the purge's pace again), after a.retryWait: the purge delay at the first
// refusal, doubled at each refusal again, up to maxRetryWait (or the delay, when longer). So a
// provider that refuses for good is asked again ever less often, not at every tick of a few
// milliseconds. Trim and Close try the regions again whatever the wait. The timer retries so
// over any provider (a.retries: a purge delay), one that neither decommits nor lends, whose
// purge needs no timer (a.clock.Timed false), included: a region grow could not use and the
// provider refused to take back (a driver's free refused during a capture) is tried again too.

// maxRetryWait bounds the wait between tries of a refused region's release.
const maxRetryWait = time.Minute

// scheduleRetry arms the timer to release the refused regions again after a.retryWait, unless
// it is armed already or there is none. Called under a.mu.
func (a *Arena) scheduleRetry() {
	if !a.retries || a.closed || len(a.refused) == 0 || a.clock.Armed.Load() || a.retryArmed {
		return
	}
	a.retryArmed = true
	a.armTimer(a.retryWait)
}

// backOff doubles the wait before the next try of a refused release, up to maxRetryWait.
// Called under a.mu.
func (a *Arena) backOff() {
	limit := max(maxRetryWait, a.delay)
	if a.retryWait > limit/2 { // doubled, it would pass the limit (or overflow)
		a.retryWait = limit
		return
	}
	a.retryWait *= 2
}
