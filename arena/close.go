package arena

import "fmt"

// Close decommits and releases every region. It fails with ErrBusy, and releases nothing, while
// chunks are still handed out. A region the provider refuses to release stays the arena's,
// counted in Stats (Reserved; Committed, what is still committed of it; RegionsRefused), and
// Close returns an error wrapping ErrReleaseRefused and the provider's: the arena is closed all
// the same, and the next Close tries those regions again (it returns ErrClosed once none is
// left). Regions whose release was refused before Close (by a purge, Trim) are released the
// same way. A provider that is a KeptReleaser gives back what it kept held by no region
// (ReleaseKept) at each such Close; Close returns its error as it is.
func (a *Arena) Close() error {
	a.pcMu.Lock() // waits for the chunk a Precommit is committing, if any
	defer a.pcMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		if len(a.refused) != 0 || a.provKept {
			return a.releaseAll()
		}
		return ErrClosed
	}
	if a.st.ChunksInUse > 0 {
		return fmt.Errorf("%w: %d chunks", ErrBusy, a.st.ChunksInUse)
	}
	if a.timer != nil {
		a.timer.Stop()
	}
	a.kept = nil // no span is in use, so no range is tracked but by a holder's mistake
	a.purge(1<<63 - 1)
	a.pcDone.Broadcast() // an Alloc waiting for Precommit's chunks sees closed
	for _, r := range *a.regions.Load() {
		a.unmapping(r.r)
	}
	a.closed = true
	a.observers = nil
	return a.releaseAll()
}

// releaseAll gives every region of a closed arena back to the provider, and keeps those it
// refuses, with their reserved and committed bytes, for the next Close (refused.go); then what
// a KeptReleaser provider kept, which the next Close tries again while the provider refuses. It
// returns the first refusal. Called under a.mu.
func (a *Arena) releaseAll() error {
	for _, r := range *a.regions.Load() {
		ng := int((r.r.Size + a.caps.Granule - 1) >> r.gshift)
		committed := uint64(r.commit.Count(0, ng)) << r.gshift
		a.refused = append(a.refused, refusedRegion{r: r.r, committed: committed})
		a.st.Chunks -= r.nchunks // its chunks are gone, released or not, as releaseIdle's
		a.st.AlignWaste -= uint64(r.grid - r.r.Base)
	}
	a.regions.Store(new([]*region))
	first := a.releaseRefused()
	a.st.Committed, a.reserved = 0, 0 // what the regions kept hold, and nothing else, now
	for _, x := range a.refused {
		a.st.Committed += x.committed
		a.reserved += x.r.Size
	}
	if k, ok := a.prov.(KeptReleaser); ok {
		err := k.ReleaseKept()
		if err != nil && first == nil {
			first = err
		}
		a.provKept = err != nil
	}
	return first
}
