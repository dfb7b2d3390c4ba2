package pinned

import (
	"sync/atomic"
	"time"
)

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
// its claim (ZeroOnFree) or free of the buffer (nil: none), and returns a function that restores
// the previous one.
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

// SetClaimHooks sets the functions a free's claim of a held buffer's tag runs before its
// compare-and-swap of the tag and once it has locked it (nil: none), and returns a function
// that restores the previous ones.
func SetClaimHooks(before, locked func(tag *atomic.Uintptr)) (restore func()) {
	oldBefore, oldLocked := claimBefore, claimLocked
	claimBefore, claimLocked = before, locked
	return func() { claimBefore, claimLocked = oldBefore, oldLocked }
}

// CountHolds adds d to the pool's count of held buffers, as a Hold does before it reads a
// buffer's tag.
func CountHolds(p *Pool, d int64) { p.out.active.Add(d) }

// FastPaths reports whether the pool's frees take its fast sections.
func FastPaths(p *Pool) bool { return p.fast }

// The tags of a buffer with no stream recorded, and of one a record has locked.
const (
	TagNone   = tagNone
	TagLocked = tagLocked
)

// SetRecordSharedLook sets the function a RecordStream on its way to the uses map runs between
// its read of the buffer's tag and its lock of the uses shard (nil: none), and returns a function
// that restores the previous one.
func SetRecordSharedLook(f func()) (restore func()) {
	old := recordSharedLook
	recordSharedLook = f
	return func() { recordSharedLook = old }
}

// Uses returns the number of buffers the pool keeps a use for (streamtag.go's uses map).
func Uses(p *Pool) int {
	if p.order == nil {
		return 0
	}
	n := 0
	for i := range p.order.uses {
		sh := &p.order.uses[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
