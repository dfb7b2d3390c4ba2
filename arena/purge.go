package arena

import (
	"errors"
	"time"
)

// # Purge
//
// Committed memory that no span wants (unwanted: commit &^ want, see commit.go) stays committed for
// Options.PurgeDelay, in case it is claimed again, and is then decommitted by a timer; Trim
// decommits it at once. A free reads no clock: the timer ticks every half delay while unwanted
// memory or an idle kept range waits, and each tick advances the purge generation a.clock.Gen. A
// chunk is stamped with the generation in which memory in it last became unwanted (markUnwanted)
// and purged at the third tick after it, that is at least one delay and at most 1.5 delays later.
// The stamp is per chunk: a chunk whose memory keeps being given back and claimed keeps all of its
// unwanted memory until it settles.
//
// Invariants:
//
//   - Every chunk that holds unwanted memory is stale (r.stale); the purge scans stale chunks only
//     and clears a chunk's mark only when none of its memory is left unwanted, so memory the
//     provider refused to decommit is tried again at the next tick.
//   - The timer ticks at the purge's pace only when a.clock.Timed (a delay, and a provider that
//     decommits or lends), for refused regions alone when a.retries (a delay), and is armed at
//     most once (a.clock.Armed, a.retryArmed). It rearms itself while unwanted memory or an idle
//     kept range waits; otherwise it is armed for the regions whose release was refused, if
//     any, backing off (a.retryArmed, refused_retry.go), or stops; the next markUnwanted or
//     Idle starts it at the purge's pace again.
//   - Chunks stamped keepStamp (Precommit) are left to Trim, forced purges and Close, and do not
//     keep the timer ticking; an Alloc there, or memory given back there, stamps them anew (a
//     Reserve does not: its span commits what it uses).
//   - Regions committed whole at Reserve are never purged.
//   - Everything here runs under a.mu. a.clock's Armed and Gen are atomics only so that a
//     holder's keep.Clock.Idle can read them without the lock; they are written under it.

// Trim decommits every free chunk now, whatever the purge delay, gives up every idle
// tracked range, and releases the regions the provider refused to release before
// (Stats.RegionsRefused) and, over a provider with Caps.Releases, every empty region.
func (a *Arena) Trim() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.giveUp(1<<63 - 1)
		purged := a.st.Purged
		a.purge(1<<63 - 1)
		a.logPurge("trim", a.st.Purged-purged)
		_ = a.releaseRefused() // what is refused again stays counted, for the next try
		a.releaseIdle(1<<63 - 1)
	}
}

// markUnwanted stamps chunks [first, last) that hold committed memory no span wants with the
// purge generation, and arms the purge timer.
func (a *Arena) markUnwanted(r *region, first, last int) { a.markUnwantedKeep(r, first, last, false) }

// markUnwantedKeep is markUnwanted that leaves alone, when keep is set, the chunks whose memory
// Precommit committed (keepStamp): a span reserved there commits its parts as it uses them.
func (a *Arena) markUnwantedKeep(r *region, first, last int, keep bool) {
	any := false
	for i := first; i < last; i++ {
		if keep && r.stamp[i] == keepStamp && r.stale.Get(i) {
			continue
		}
		if glo, ghi := a.chunkGranules(r, i); r.unwanted(glo, ghi) {
			r.stamp[i] = a.clock.Gen.Load()
			r.stale.SetRange(i, i+1, true)
			any = true
		}
	}
	if any {
		a.schedulePurge()
	}
}

// markAged is markUnwanted for memory idle for the purge delay already (DecommitIdle): chunks
// that hold no other unwanted memory are stamped two generations back, so that the timer's
// next tick purges them; a chunk stamped already keeps its stamp, and its memory its delay.
func (a *Arena) markAged(r *region, first, last int) {
	any := false
	for i := first; i < last; i++ {
		if glo, ghi := a.chunkGranules(r, i); r.unwanted(glo, ghi) {
			if !r.stale.Get(i) || r.stamp[i] == keepStamp { // idle ends a precommit's hold
				r.stamp[i] = a.clock.Gen.Load() - 2
				r.stale.SetRange(i, i+1, true)
			}
			any = true
		}
	}
	if any {
		a.schedulePurge()
	}
}

// unwanted reports whether granules [glo, ghi) hold committed memory no span wants.
func (r *region) unwanted(glo, ghi int) bool { return r.commit.AnyAndNot(r.want, glo, ghi) }

func (a *Arena) schedulePurge() {
	if !a.clock.Timed || a.clock.Armed.Load() {
		return
	}
	a.clock.Armed.Store(true)
	if a.retryArmed {
		// Armed for a refused region's later try only: tick at the purge's pace instead, unless
		// that tick has fired and waits for the lock (it counts as the next tick).
		a.retryArmed = false
		if !a.timer.Stop() {
			return
		}
	}
	a.armTimer(max((a.delay+1)/2, 1)) // two ticks make at least a delay
}

// armTimer makes the purge timer tick once, after d. Called under a.mu, with the timer stopped
// or fired.
func (a *Arena) armTimer(d time.Duration) {
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.purgeTick)
	} else {
		a.timer.Reset(d)
	}
}

func (a *Arena) purgeTick() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clock.Armed.Store(false) // before giveUp loads the states of tracked ranges: see kept.go
	a.retryArmed = false
	if a.closed {
		return
	}
	// Memory stamped in generation g became unwanted before tick g+1; tick g+3 comes at least
	// two half delays after that. Idle ranges are stamped the same way.
	gen := a.clock.Gen.Add(1)
	idle := a.giveUp(gen - 3)
	purged := a.st.Purged
	pending := a.purge(gen - 3)
	a.logPurge("purge", a.st.Purged-purged)
	_ = a.releaseRefused() // before releaseIdle: a region it has just had refused waits a tick
	pending = a.releaseIdle(gen-3) || pending
	if pending || idle {
		a.schedulePurge()
	} else {
		a.scheduleRetry() // the refused regions left, if any, alone: later and later
	}
}

// purge decommits the committed memory no span wants (free chunks, and what spans in use
// left unclaimed) in chunks stamped in generation cutoff or before, and reports whether such
// memory remains. The decommits run together at the end, on the workers where the provider
// splits (workers.go).
func (a *Arena) purge(cutoff int64) (pending bool) {
	if !a.caps.Decommits {
		return false
	}
	touched := a.spans[:0] // the chunks released: gspan{r, i, i+1}
	for _, r := range *a.regions.Load() {
		if r.r.Committed {
			continue
		}
		for i := r.stale.Next(0, r.nchunks, true); i < r.nchunks; i = r.stale.Next(i+1, r.nchunks, true) {
			glo, ghi := a.chunkGranules(r, i)
			if r.unwanted(glo, ghi) && r.stamp[i] > cutoff {
				pending = pending || r.stamp[i] != keepStamp // precommitted memory waits for no timer
				continue
			}
			a.planRelease(r, glo, ghi)
			touched = append(touched, gspan{r, i, i + 1})
		}
	}
	a.runDecommits()
	for _, c := range touched {
		glo, ghi := a.chunkGranules(c.r, c.s)
		c.r.stale.SetRange(c.s, c.s+1, c.r.unwanted(glo, ghi)) // what failed to decommit stays stale
	}
	a.spans = touched[:0]
	return pending
}

// planRelease adds the committed granules in [glo, ghi) that no span wants to the decommits
// runDecommits makes, merging runs that touch or overlap: chunks off the granule grid share a
// granule (see ownGranules), which the purge plans for each of them, still committed until
// runDecommits, and which must be decommitted, and counted, once.
func (a *Arena) planRelease(r *region, glo, ghi int) {
	_ = r.commit.Runs(glo, ghi, true, func(s, e int) error {
		return r.want.Runs(s, e, false, func(s, e int) error {
			if n := len(a.decs); n > 0 && a.decs[n-1].r == r && a.decs[n-1].e >= s && a.decs[n-1].s <= s {
				a.decs[n-1].e = max(a.decs[n-1].e, e)
			} else {
				a.decs = append(a.decs, gspan{r, s, e})
			}
			return nil
		})

	})

}

// runDecommits returns the planned runs to the provider, on the workers when the provider
// splits and there is enough of it, and records what was decommitted; a run the provider
// refuses stays committed (the memory is still usable) and unwanted, but one it left
// unfinished (ErrDecommitUnfinished) is decommitted, and dirty.
func (a *Arena) runDecommits() {
	ds := a.decs
	a.decs = ds[:0]
	if len(ds) == 0 {
		return
	}
	decommit := func(x gspan) error {
		return a.prov.Decommit(x.r.r, uintptr(x.s)<<x.r.gshift, uintptr(x.e-x.s)<<x.r.gshift)
	}
	ps := ds
	var errs []error
	if a.caps.Splits && a.parallel(ds) {
		ps = a.pieces(ds)
		errs = a.fanout(len(ps), func(i int) error { return decommit(ps[i]) })
	} else {
		for i, x := range ds {
			if err := decommit(x); err != nil {
				if errs == nil {
					errs = make([]error, len(ds))
				}
				errs[i] = err
			}
		}
	}
	for i, x := range ps {
		unfinished := false
		if errs != nil && errs[i] != nil {
			if !errors.Is(errs[i], ErrDecommitUnfinished) {
				a.st.DecommitsRefused++
				a.logDecommitRefused(x.r, x.s, x.e, errs[i])
				continue
			}
			unfinished = true // uncommitted, its pages perhaps not dropped: not known zero
		}
		x.r.commit.SetRange(x.s, x.e, false)
		if a.caps.ZeroOnCommit && !unfinished {
			x.r.dirty.SetRange(x.s, x.e, false)
		}
		n := uint64(x.e-x.s) << x.r.gshift
		a.st.Committed -= n
		a.st.Purged += n
		a.st.Decommits++
	}
}
