package arena

import (
	"fmt"
	"time"
)

// # Commit and decommit
//
// Memory is committed at the provider's granule (Caps.Granule: a host page, a VMM granule) and
// tracked per granule in three bitmaps of each region, indexed from the region's base (not its
// chunk grid):
//
//	commit  the provider backs the granule (locked, for locked memory)
//	want    a span claims it: Alloc committed it for the span, or Commit did since
//	dirty   it is not known to read as zero
//
// Committed memory that is not wanted belongs to the purge (purge.go). Alloc and Commit raise
// commit, then want and dirty; Decommit and Free only lower want, and leave the decommit itself
// to the purge, so that memory given back and claimed again within the delay costs no provider
// call. A Joiner provider (host registration) is asked, after the commit, to make a span's
// granules one unit, because the driver refuses a copy whose host range spans two units.
//
// Invariants, all under a.mu:
//
//   - want is a subset of commit: want is raised only over granules just committed, and the
//     purge decommits only granules no span wants.
//   - A failed commit leaves nothing new committed (commitOnce undoes its own provider calls)
//     but what the provider refused to undo, which is recorded committed and unwanted;
//     a failed join leaves the granules committed but unwanted, and stamped for the purge.
//   - Wherever memory becomes committed and unwanted, its chunks are marked (markUnwanted), so
//     the purge, which looks at marked chunks only, finds it.
//   - dirty is lowered only when a granule is decommitted by a provider that zero-fills on commit
//     (Caps.ZeroOnCommit); a range reads as zero exactly when none of its granules is dirty.
//   - A region the provider commits whole at Reserve (Region.Committed) is committed from the
//     start and one unit already: no commit, join or decommit ever reaches the provider for it.
//   - A commit refused for want of memory (the memlock limit, device memory) gives up idle kept
//     ranges and purges at once, then is tried once more: memory kept for reuse never makes an
//     allocation fail.

// Commit makes sure [addr, addr+size), inside a span in use, is committed: the heap calls it
// before reusing part of a segment it decommitted. It reports whether the range reads as zero.
// A range committed and claimed already (by Alloc or an earlier Commit) is left as it is, with
// no provider call.
func (a *Arena) Commit(addr, size uintptr) (zeroed bool, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, err := a.inUse(addr, size)
	if err != nil {
		return false, err
	}
	a.st.CommitCalls++
	glo, ghi := r.granules(addr, size)
	zeroed = r.dirty.Count(glo, ghi) == 0
	if n := ghi - glo; r.commit.Count(glo, ghi) == n && r.want.Count(glo, ghi) == n {
		// Claimed already, so inside the units of the claims that made it (Joiner): joining
		// the range alone would cut a unit that holds the span's memory beside it.
		return zeroed, nil
	}
	if err := a.commit(r, glo, ghi); err != nil {
		return false, err
	}
	if err := a.join(r, glo, ghi); err != nil {
		a.markUnwanted(r, int((addr-r.grid)>>a.shift), int((addr+size-1-r.grid)>>a.shift)+1)
		return false, err
	}
	r.dirty.SetRange(glo, ghi, true)
	r.want.SetRange(glo, ghi, true)
	return zeroed, nil
}

// Decommit gives up the whole granules inside [addr, addr+size), part of a span in use (a page
// the heap no longer needs): they are decommitted after the purge delay, or by Trim, unless a
// Commit claims them again first. The span stays handed out.
func (a *Arena) Decommit(addr, size uintptr) error { return a.decommit(addr, size, false) }

// DecommitIdle is Decommit for memory that has been idle for the purge delay already (a heap
// found a page's free blocks untouched since it last looked): the whole granules inside
// [addr, addr+size) are decommitted at the purge timer's next tick, half a delay at most,
// rather than a delay later, unless a Commit claims them first. Memory waiting in the same
// chunks keeps its own delay: a chunk stamped already keeps its stamp.
func (a *Arena) DecommitIdle(addr, size uintptr) error { return a.decommit(addr, size, true) }

// decommit is Decommit, and DecommitIdle when aged.
func (a *Arena) decommit(addr, size uintptr, aged bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, err := a.inUse(addr, size)
	if err == nil {
		a.st.DecommitCalls++
	}
	if err != nil || !a.caps.Decommits || r.r.Committed {
		return err
	}
	glo, ghi, ok := r.whole(addr, size)
	if !ok {
		return nil
	}
	r.want.SetRange(glo, ghi, false)
	first, last := int((addr-r.grid)>>a.shift), int((addr+size-1-r.grid)>>a.shift)+1
	if aged {
		a.markAged(r, first, last)
	} else {
		a.markUnwanted(r, first, last)
	}
	return nil
}

// Wanted reports whether every granule that [addr, addr+size) touches is committed and claimed
// by a span (Alloc, Commit), so that the purge leaves it alone: what a heap checks its live
// blocks against (its invariants). A region committed whole at Reserve is wanted throughout.
func (a *Arena) Wanted(addr, size uintptr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, err := a.inUse(addr, size)
	if err != nil {
		return false
	}
	if r.r.Committed {
		return true
	}
	glo, ghi := r.granules(addr, size)
	return r.commit.Count(glo, ghi) == ghi-glo && r.want.Count(glo, ghi) == ghi-glo
}

// GranuleEnd returns the end of the commit granule that holds address p, no further than the
// end of p's region: committing any byte of a granule commits all of it, so memory committed
// through p is committed up to there. Granules count from the region's base, which need not
// lie on a granule boundary (an external region). ok is false when p lies in no region's
// chunks. It takes no lock.
func (a *Arena) GranuleEnd(p uintptr) (end uintptr, ok bool) {
	r := a.regionAt(p)
	if r == nil {
		return 0, false
	}
	return min(r.r.Base+((p-r.r.Base)>>r.gshift+1)<<r.gshift, r.end), true
}

// Zero clears [addr, addr+size), memory of a span in use that is committed and claimed (Wanted:
// a heap's live block), with the provider's Zeroer. Any other range is refused with ErrInvalid,
// nothing cleared: memory outside the arena, or decommitted, is never written. A provider with
// no Zeroer is refused alike. Those refusals wrap ErrNotStarted too.
func (a *Arena) Zero(addr, size uintptr) error {
	if a.zeroer == nil {
		return NotStarted(fmt.Errorf("%w: provider %s cannot clear memory", ErrInvalid,
			a.prov.Name()))
	}
	if size == 0 {
		return nil
	}
	if !a.Wanted(addr, size) {
		return NotStarted(fmt.Errorf("%w: clear of [%#x, +%d): not committed memory of a span"+
			" in use", ErrInvalid, addr, size))
	}
	return a.zeroer.Zero(addr, size)
}

// commit commits the granules of [glo, ghi) that are not committed. When the provider refuses
// for want of memory (the memlock limit, device memory) while committed memory no span wants
// waits for the purge, that memory is given back at once and the commit tried again: memory
// the arena keeps for reuse must not be what makes an allocation fail. Unwanted granules
// inside [glo, ghi) may go and come back in the process, which costs time but not
// correctness.
func (a *Arena) commit(r *region, glo, ghi int) error {
	err := a.commitOnce(r, glo, ghi)
	if err == nil {
		return nil
	}
	if !Exhausted(err) {
		a.logRefused(r, glo, ghi, err)
		return err
	}
	purged := a.st.Purged
	a.giveUp(1<<63 - 1)
	a.purge(1<<63 - 1)
	if a.st.Purged == purged {
		a.logRefused(r, glo, ghi, err)
		return err
	}
	a.st.ForcedPurges++
	err = a.commitOnce(r, glo, ghi)
	a.logForcedPurge(r, glo, ghi, a.st.Purged-purged, err)
	return err
}

// commitOnce asks the provider to commit the granules of [glo, ghi) that are not committed,
// on the workers when there is enough of it (workers.go); when a provider call fails, what the
// others committed is given back.
func (a *Arena) commitOnce(r *region, glo, ghi int) error {
	if r.r.Committed {
		return nil
	}
	rs := a.spans[:0]
	_ = r.commit.Runs(glo, ghi, false, func(s, e int) error {
		rs = append(rs, gspan{r, s, e})
		return nil
	})

	a.spans = rs[:0]
	if len(rs) == 0 {
		return nil
	}
	start := time.Now()
	calls, kept, err := a.commitSpans(rs)
	if err != nil {
		a.keepCommitted(kept)
		return err
	}
	a.st.CommitTime += time.Since(start) // of commits that succeeded: CommitPerGiB is their cost
	a.st.Commits += uint64(calls)
	for _, x := range rs {
		r.commit.SetRange(x.s, x.e, true)
		n := uint64(x.e-x.s) << r.gshift
		a.st.Committed += n
		a.st.CommitBytes += n
	}
	a.st.PeakCommitted = max(a.st.PeakCommitted, a.st.Committed)
	return nil
}

// join has a Joiner provider make the committed granules [glo, ghi), which a span is being
// handed, one unit (see Joiner). Regions committed whole at Reserve are one unit already.
func (a *Arena) join(r *region, glo, ghi int) error {
	if a.joiner == nil || r.r.Committed {
		return nil
	}
	start := time.Now()
	err := a.joiner.Join(r.r, uintptr(glo)<<r.gshift, uintptr(ghi-glo)<<r.gshift)
	a.st.CommitTime += time.Since(start)
	return err
}

// inUse returns the region of [addr, addr+size) after checking that its chunks are handed out.
func (a *Arena) inUse(addr, size uintptr) (*region, error) {
	if a.closed {
		return nil, ErrClosed
	}
	if r := a.regionAt(addr); r != nil && size > 0 && size <= r.end-addr {
		first, last := int((addr-r.grid)>>a.shift), int((addr+size-1-r.grid)>>a.shift)
		if r.used.Count(first, last+1) == last-first+1 {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: [%#x, +%d) is not inside a span in use", ErrInvalid, addr, size)
}
