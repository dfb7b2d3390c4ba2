package arena

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/keep"
)

// # Kept memory
//
// A heap keeps a freed page or huge object for the next request of about its size. Giving its
// memory to the purge at every free (Decommit) and claiming it back at every reuse (Commit)
// costs two trips through the arena's lock per alloc+free pair even when the same memory comes
// straight back: most of a 1 MiB pair's time. A Kept range is the cheap way: registered once
// (Track), it is marked idle at each free and claimed at each reuse with one atomic operation
// each, and the arena stays out of the way unless the range stays idle.
//
// The range stays committed and wanted while it is idle. The purge timer runs while any
// tracked range is idle; a range still idle one purge delay after it became so (at most half
// as long again, the delay of freed chunks) is given up by the timer: marked given, then
// decommitted like memory passed to Decommit and left there. Trim, Close's purge and a forced
// purge (a commit refused for want of memory) give up every idle range at once, whatever its
// age. So memory a heap keeps is never locked for longer than memory it frees.
//
// States of a Kept, in the low two bits of k.Word (the high bits hold the stamp, so that a free
// makes one atomic store):
//
//	keptBusy   in use by its holder, or not tracked; the arena never touches it
//	keptIdle   idle: committed and wanted, stamped with the purge generation it became idle in
//	keptGiven  given up by the arena (under its lock): decommitted, or waiting for the purge
//
// The holder moves busy→idle (Idle) and given→busy (Claim); the arena moves idle→given under
// its lock; idle→busy is a compare-and-swap (Claim) that races with the arena's, so exactly one
// of them wins. A holder that finds its range given calls Commit, which takes the arena's lock
// and so comes after the give-up is complete. Idle and the timer pair like Dekker's flags: Idle
// stores the state then loads armed, the tick stores armed = false then loads every state, so
// either the tick sees the range idle and ticks again or Idle sees the timer stopped and
// starts it (Go's atomics are sequentially consistent).
//
// Stats: Committed and InUse count kept ranges (they are committed, inside spans in use);
// Kept reports how much of that idle memory the timer will give up.

// tracker is an Arena seen as the keep.Tracker of its holders (package heap), which reach it
// with keep.Of: the kept-range calls are no part of the public API.
type tracker Arena

func init() { keep.Register(func(a *Arena) keep.Tracker { return (*tracker)(a) }) }

// Track registers k as the range [addr, addr+size) of a span in use, busy. The holder must
// Untrack it before the span goes back (Free) and before the range is given to Decommit or
// reused for anything else. Tracking takes the arena's lock: do it once, not at every free.
func (t *tracker) Track(k *keep.Range, addr, size uintptr) error {
	a := (*Arena)(t)
	a.mu.Lock()
	defer a.mu.Unlock()
	if k.Idx != 0 {
		return fmt.Errorf("%w: range [%#x, +%d) is tracked already", ErrInvalid, k.Addr, k.Size)
	}
	if _, err := a.inUse(addr, size); err != nil {
		return err
	}
	k.Addr, k.Size = addr, size
	k.Word.Store(uint64(keep.Busy))
	a.kept = append(a.kept, k)
	k.Idx = len(a.kept)
	return nil
}

// Untrack ends k's tracking and reports whether the arena had given the range up (its memory
// decommitted, or waiting for the purge): when it had not, the memory is still committed and
// wanted, and the holder gives it back (Decommit, Free) as it would any memory.
func (t *tracker) Untrack(k *keep.Range) (given bool) {
	a := (*Arena)(t)
	a.mu.Lock()
	defer a.mu.Unlock()
	if k.Idx == 0 || k.Idx > len(a.kept) || a.kept[k.Idx-1] != k {
		k.Idx = 0 // not tracked, or dropped by Close
		return false
	}
	last := a.kept[len(a.kept)-1]
	a.kept[k.Idx-1], last.Idx = last, k.Idx
	a.kept[len(a.kept)-1] = nil
	a.kept = a.kept[:len(a.kept)-1]
	k.Idx = 0
	given = k.Word.Load()&keep.State == uint64(keep.Given)
	k.Word.Store(uint64(keep.Busy))
	return given
}

// Clock returns the arena's purge clock: a holder marks its ranges idle with it, with no call
// into the arena and no lock (Clock.Idle), and calls Start when Idle says the timer stopped.
func (t *tracker) Clock() *keep.Clock { return &t.clock }

// Start starts the purge timer after a Clock.Idle that found it stopped: it waits for the lock,
// or (wait false: heap.TryFree, which must not block) takes it only if it is free.
func (t *tracker) Start(wait bool) {
	a := (*Arena)(t)
	if !a.clock.Waits() {
		return
	}
	if wait {
		a.mu.Lock()
	} else if !a.mu.TryLock() {
		return
	}
	a.schedulePurge()
	a.mu.Unlock()
}

// giveUp gives up every tracked range idle since generation cutoff or before: it stops being
// wanted and, when it has been idle for the delay, is decommitted now (force: Trim and forced
// purges, whatever its age). It reports whether an idle range remains. Called with a.mu held.
func (a *Arena) giveUp(cutoff int64) (pending bool) {
	if !a.caps.Decommits {
		return false
	}
	given := a.given[:0]
	for _, k := range a.kept {
		w := k.Word.Load()
		if w&keep.State != uint64(keep.Idle) {
			continue
		}
		if int64(w>>keep.Shift) > cutoff {
			pending = true
			continue
		}
		if !k.Word.CompareAndSwap(w, uint64(keep.Given)) {
			continue // claimed in the meantime
		}
		if r := a.regionAt(k.Addr); r != nil && !r.r.Committed {
			if glo, ghi, ok := r.whole(k.Addr, k.Size); ok {
				r.want.SetRange(glo, ghi, false)
				a.planRelease(r, glo, ghi)
				given = append(given, k)
			}
		}
	}
	a.runDecommits()
	for _, k := range given {
		// What failed to decommit waits for the purge like any unwanted memory.
		r := a.regionAt(k.Addr)
		a.markUnwanted(r, int((k.Addr-r.grid)>>a.shift), int((k.Addr+k.Size-1-r.grid)>>a.shift)+1)
	}
	clear(given)
	a.given = given[:0]
	return pending
}

// keptIdleBytes sums the memory of idle tracked ranges: their committed whole granules (what
// giving them up decommits, where the provider decommits), so that it is part of Committed (a
// range may be committed in part: the heap's reuse of a huge range commits the bytes asked
// for). Called with a.mu held.
func (a *Arena) keptIdleBytes() (n uint64) {
	for _, k := range a.kept {
		if k.Word.Load()&keep.State != uint64(keep.Idle) {
			continue
		}
		if r := a.regionAt(k.Addr); r != nil {
			if glo, ghi, ok := r.whole(k.Addr, k.Size); ok {
				n += uint64(r.commit.Count(glo, ghi)) << r.gshift
			}
		}
	}
	return n
}

// whole returns the granules lying wholly inside [addr, addr+size), relative to the region's
// base; ok is false when there is none.
func (r *region) whole(addr, size uintptr) (glo, ghi int, ok bool) {
	off := addr - r.r.Base
	g := uintptr(1) << r.gshift
	glo = int((off + g - 1) >> r.gshift)
	ghi = int((off + size) >> r.gshift)
	return glo, ghi, ghi > glo
}
