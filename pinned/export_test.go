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

// SetAfterHoldsLook sets the function a guarded Free runs between its look at the holds and
// its claim of the buffer (nil: none), and returns a function that restores the previous one.
func SetAfterHoldsLook(f func()) (restore func()) {
	old := afterHoldsLook
	afterHoldsLook = f
	return func() { afterHoldsLook = old }
}

// SetReleaseHooks sets the function a last Release with a deferred free to make runs just
// before that free, and the one a free or Hold runs when it waits for such a Release (nil:
// none), and returns a function that restores the previous ones.
func SetReleaseHooks(release, wait func()) (restore func()) {
	oldRelease, oldWait := releaseHook, releaseWait
	releaseHook, releaseWait = release, wait
	return func() { releaseHook, releaseWait = oldRelease, oldWait }
}

// SetAfterPoll sets the function a reclaim runs between its poll and its frees (nil: none), and
// returns a function that restores the previous one.
func SetAfterPoll(f func()) (restore func()) {
	old := afterPoll
	afterPoll = f
	return func() { afterPoll = old }
}

// SetAfterCloseCount sets the function Close runs between its count of the live buffers and
// its drain (nil: none), and returns a function that restores the previous one.
func SetAfterCloseCount(f func()) (restore func()) {
	old := afterCloseCount
	afterCloseCount = f
	return func() { afterCloseCount = old }
}
