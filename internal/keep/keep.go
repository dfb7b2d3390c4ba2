// Package keep is the kept range of package arena: a range inside a span in use that its holder
// (a heap) keeps committed for reuse while nothing uses it, marked idle and claimed back with
// one atomic operation each, which the arena's purge gives up when it stays idle. Packages
// arena and heap share it; it is no part of the public API.
package keep

import "sync/atomic"

// States of a Range, in the low bits of Word (the high bits hold the purge generation it became
// idle in).
const (
	Busy  uint32 = iota // in use by its holder, or not tracked; the arena never touches it
	Idle                // idle: committed and wanted, stamped with its generation
	Given               // given up by the arena (under its lock): decommitted, or to be
)

// Shift is where the stamp starts in Word; State masks the state.
const (
	Shift = 2
	State = 1<<Shift - 1
)

// Range is a kept range. Its zero value is ready to be tracked; it must not be copied or
// reused for another range while tracked.
type Range struct {
	Word       atomic.Uint64 // state | stamp<<Shift
	Addr, Size uintptr       // set by Track, under the arena's lock
	Idx        int           // position in the arena's list plus one; 0 when not tracked
}

// Claim takes an idle range back for its holder. It returns true when the range is as it was
// left: committed and wanted, with no arena call needed. It returns false when the arena gave
// it up meanwhile: the range is busy again, and the holder must Commit what it uses.
func (k *Range) Claim() bool {
	if w := k.Word.Load(); w&State == uint64(Idle) && k.Word.CompareAndSwap(w, uint64(Busy)) {
		return true
	}
	k.Word.Store(uint64(Busy)) // given: the arena no longer touches it
	return false
}

// Tracker is what a holder does with its ranges in an arena (arena.Arena's kept-range calls).
type Tracker interface {
	// Track registers k as the range [addr, addr+size) of a span in use, busy. The holder must
	// Untrack it before the span goes back and before the range is given to Decommit or reused
	// for anything else. It takes the arena's lock: do it once, not at every free.
	Track(k *Range, addr, size uintptr) error
	// Untrack ends k's tracking and reports whether the arena had given the range up; when it
	// had not, the memory is still committed and wanted.
	Untrack(k *Range) (given bool)
	// Idle marks a tracked busy range idle: unless Claim takes it back within the purge delay
	// the arena gives it up. It takes no lock (but the first after the purge timer stopped).
	Idle(k *Range)
	// IdleWaits reports whether Idle would take the arena's lock now; a holder that must not
	// block checks it, then calls IdleNoWait.
	IdleWaits() bool
	// IdleNoWait is Idle that takes the lock only if it is free.
	IdleNoWait(k *Range)
}

// of is the arena's func(*arena.Arena) Tracker, set by Register.
var of any

// Register is called by package arena once, at init, with the function that gives an arena's
// Tracker.
func Register[A any](f func(*A) Tracker) { of = f }

// Of returns arena a's Tracker.
func Of[A any](a *A) Tracker { return of.(func(*A) Tracker)(a) }
