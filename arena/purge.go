package arena

import "time"

// # Purge
//
// Committed memory that no span wants (unwanted: commit &^ want, see commit.go) stays committed
// for Options.PurgeDelay, in case it is claimed again, and is then decommitted by a timer; Trim
// decommits it at once. A free reads no clock: the timer ticks every half delay while unwanted
// memory or an idle kept range waits, and each tick advances the purge generation a.gen. A chunk
// is stamped with the generation in which memory in it last became unwanted (markUnwanted) and
// purged at the third tick after it, that is at least one delay and at most 1.5 delays later.
// The stamp is per chunk: a chunk whose memory keeps being given back and claimed keeps all of
// its unwanted memory until it settles.
//
// Invariants:
//
//   - Every chunk that holds unwanted memory is stale (r.stale); the purge scans stale chunks only
//     and clears a chunk's mark only when none of its memory is left unwanted, so memory the
//     provider refused to decommit is tried again at the next tick.
//   - The timer runs only when a.timed (a delay, and a provider that decommits) and is armed at
//     most once (a.armed). It rearms itself while unwanted memory or an idle kept range waits and
//     stops otherwise; the next markUnwanted or Idle starts it again.
//   - Chunks stamped keepStamp (Precommit) are left to Trim, forced purges and Close, and do not
//     keep the timer ticking.
//   - Regions committed whole at Reserve are never purged.
//   - Everything here runs under a.mu. a.armed and a.gen are atomics only so that Kept.Idle
//     (kept.go) can read them without the lock; they are written under it.

// Trim decommits every free chunk now, whatever the purge delay, and gives up every idle
// tracked range (kept.go).
func (a *Arena) Trim() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.giveUp(1<<63 - 1)
		purged := a.st.Purged
		a.purge(1<<63 - 1)
		a.logPurge("trim", a.st.Purged-purged)
	}
}

// markUnwanted stamps chunks [first, last) that hold committed memory no span wants with the
// purge generation, and arms the purge timer.
func (a *Arena) markUnwanted(r *region, first, last int) {
	any := false
	for i := first; i < last; i++ {
		if glo, ghi := a.chunkGranules(r, i); r.unwanted(glo, ghi) {
			r.stamp[i] = a.gen.Load()
			r.stale.setRange(i, i+1, true)
			any = true
		}
	}
	if any {
		a.schedulePurge()
	}
}

// unwanted reports whether granules [glo, ghi) hold committed memory no span wants.
func (r *region) unwanted(glo, ghi int) bool { return r.commit.anyAndNot(r.want, glo, ghi) }

func (a *Arena) schedulePurge() {
	if !a.timed || a.armed.Load() {
		return
	}
	a.armed.Store(true)
	tick := max((a.delay+1)/2, 1) // two ticks make at least a delay
	if a.timer == nil {
		a.timer = time.AfterFunc(tick, a.purgeTick)
	} else {
		a.timer.Reset(tick)
	}
}

func (a *Arena) purgeTick() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed.Store(false) // before giveUp loads the states of tracked ranges: see kept.go
	if a.closed {
		return
	}
	// Memory stamped in generation g became unwanted before tick g+1; tick g+3 comes at least
	// two half delays after that. Idle ranges are stamped the same way.
	gen := a.gen.Add(1)
	idle := a.giveUp(gen - 3)
	purged := a.st.Purged
	pending := a.purge(gen - 3)
	a.logPurge("purge", a.st.Purged-purged)
	if pending || idle {
		a.schedulePurge()
	}
}

// purge decommits the committed memory no span wants (free chunks, and what spans in use
// left unclaimed) in chunks stamped in generation cutoff or before, and reports whether such
// memory remains.
func (a *Arena) purge(cutoff int64) (pending bool) {
	if !a.caps.Decommits {
		return false
	}
	for _, r := range *a.regions.Load() {
		if r.r.Committed {
			continue
		}
		for i := r.stale.next(0, r.nchunks, true); i < r.nchunks; i = r.stale.next(i+1, r.nchunks, true) {
			glo, ghi := a.chunkGranules(r, i)
			if r.unwanted(glo, ghi) && r.stamp[i] > cutoff {
				pending = pending || r.stamp[i] != keepStamp // precommitted memory waits for no timer
				continue
			}
			a.release(r, glo, ghi)
			r.stale.setRange(i, i+1, r.unwanted(glo, ghi)) // what failed to decommit stays stale
		}
	}
	return pending
}

// release returns the committed granules in [glo, ghi) that no span wants to the provider.
func (a *Arena) release(r *region, glo, ghi int) {
	_ = r.commit.runs(glo, ghi, true, func(s, e int) error {
		return r.want.runs(s, e, false, func(s, e int) error {
			if err := a.prov.Decommit(r.r, uintptr(s)<<r.gshift, uintptr(e-s)<<r.gshift); err != nil {
				return nil // keep it committed: the memory is still usable
			}
			r.commit.setRange(s, e, false)
			if a.caps.ZeroOnCommit {
				r.dirty.setRange(s, e, false)
			}
			n := uint64(e-s) << r.gshift
			a.st.Committed -= n
			a.st.Purged += n
			a.st.Decommits++
			return nil
		})
	})
}
