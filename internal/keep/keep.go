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

// Clock is an arena's purge clock as its holders read it with no call: the generation an idle
// range is stamped with, and whether the purge timer runs.
type Clock struct {
	Armed atomic.Bool  // the timer will tick; written under the arena's lock
	Gen   atomic.Int64 // purge generation: timer ticks so far; written under the arena's lock
	Timed bool         // the timer runs at all: a delay and a provider that decommits (set at New)
}

// Waits reports whether marking a range idle now must start the purge timer (Tracker.Start),
// which takes the arena's lock.
func (c *Clock) Waits() bool { return c.Timed && !c.Armed.Load() }

// Idle marks the tracked busy range k idle: nothing uses it, and unless Claim takes it back
// within the purge delay the arena gives it up. It reports whether the holder must then start
// the purge timer (Tracker.Start). Idle and the timer pair like Dekker's flags: Idle stores the
// state then loads Armed, a tick stores Armed = false then loads every state.
func (c *Clock) Idle(k *Range) (start bool) {
	k.Word.Store(uint64(c.Gen.Load())<<Shift | uint64(Idle))
	return c.Waits()
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
	// Clock returns the arena's purge clock, which marks ranges idle (Clock.Idle).
	Clock() *Clock
	// Start starts the purge timer after a Clock.Idle that asked for it, taking the arena's
	// lock; with wait false only if the lock is free (a holder that must not block): when it is
	// busy, the range stays idle with no timer to give it up until the next Idle, Trim or
	// Close: memory kept longer than the purge delay, never memory lost.
	Start(wait bool)
}

// of is the arena's func(*arena.Arena) Tracker, set by Register.
var of any

// Register is called by package arena once, at init, with the function that gives an arena's
// Tracker.
func Register[A any](f func(*A) Tracker) { of = f }

// Of returns arena a's Tracker.
func Of[A any](a *A) Tracker { return of.(func(*A) Tracker)(a) }
