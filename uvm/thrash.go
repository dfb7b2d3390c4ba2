package uvm

import "time"

// Thrash detection, per block, as NVIDIA's UVM driver does it (see the package documentation),
// and the tier's clock, which it reads.

const (
	// thrashQuiet is how long a block must go without a migration for its thrash history to
	// reset (the driver's 2000 lapses).
	thrashQuiet = time.Second
	// thrashThreshold is the number of migrations in a row, each within a lapse, that make a
	// block thrash.
	thrashThreshold = 3
)

// thrashState is a block's migration history, for thrash detection (see the package
// documentation): the driver's policy, per block, with the lapse and pin time of Options.
type thrashState struct {
	last  int64 // time of the last migration, in nanoseconds (0: none)
	run   uint8 // migrations in a row, each within a lapse of the one before
	until int64 // kept on the device until then
}

// now returns the tier's clock.
func (t *Tier) now() time.Time { return t.opts.clock() }

// nowNanos returns the tier's clock in nanoseconds.
func (t *Tier) nowNanos() int64 { return t.opts.clock().UnixNano() }

// thrashed records a migration of b at now and starts its protection when it thrashes.
func (t *Tier) thrashed(b *block, now time.Time) {
	if t.opts.thrashLapse < 0 {
		return
	}
	ns := now.UnixNano()
	th := &b.thrash
	switch gap := ns - th.last; {
	case th.last == 0 || gap > int64(thrashQuiet):
		th.run = 1 // a quiet second (or the first migration) resets the history
	case gap <= t.opts.thrashLapse:
		if th.run < thrashThreshold {
			th.run++
		}
	default:
		th.run = 1
	}
	th.last = ns
	if th.run >= thrashThreshold && th.until <= ns {
		th.until = ns + t.opts.thrashPin
		th.run = 0
		t.st.ThrashEvents++
	}
}

// protected reports whether b is kept on the device for thrashing at now (nanoseconds).
func (t *Tier) protected(b *block, now int64) bool { return b.thrash.until > now }
