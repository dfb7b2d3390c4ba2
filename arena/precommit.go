package arena

import (
	"errors"
	"fmt"
	"time"
)

// keepStamp is the purge stamp of a chunk whose memory Precommit committed: the purge timer
// leaves it alone (Trim, a forced purge and Close do not), until a span takes the chunk and
// the chunk's memory becomes the purge's like any other.
const keepStamp = 1<<63 - 1

// precommitPerWorker is how many chunks each worker gets in one Precommit batch: a batch is
// what an allocation that needs one of the chunks held may wait for (at capacity only), so it
// stays short, but long enough that the workers seldom idle between batches.
const precommitPerWorker = 2

// Precommit commits up to size bytes of free chunks ahead of need, so that later allocations
// find their memory committed (and pinned, for pinned memory). It works in batches of a few
// chunks per worker (Options.CommitWorkers), committed side by side, and holds the
// arena's lock only to choose a batch and to record it: allocation goes on while the provider
// commits, takes other chunks and commits what it needs itself; it waits for a batch only when
// the chunks the batch holds are all the capacity it could use. Stats.Precommitted and
// Usage.Precommitted count the bytes committed so far, batch by batch.
//
// Precommitted memory stays committed until a span takes it, Trim, a refused commit that needs
// the memory, or Close. A lent region (Lender) that holds precommitted memory is given back at
// Trim, not by the purge timer, once no chunk of it is in use. Precommit reserves regions as
// it needs them, up to the capacity, and returns without error when every chunk of the
// capacity is committed or in use. It returns the bytes it committed and the first error:
// ErrClosed when the arena closed meanwhile, or the provider's refusal (the memlock limit,
// device or host memory), with which it stops. A chunk whose commit fails is given back whole
// (the provider undoes its own calls), while the chunks of its batch that succeeded stay
// committed and counted. Over a provider whose regions come committed (Region.Committed:
// populated host memory, cuMemAlloc, a committed loan) it has nothing to commit: once the
// arena has reserved one such region, it reserves none for Precommit. It is meant to run in a
// goroutine of its own at startup.
func (a *Arena) Precommit(size uintptr) (uintptr, error) {
	var done uintptr
	for done < size {
		n, err := a.precommitBatch(size - done)
		done += n
		if err != nil || n == 0 {
			if errors.Is(err, ErrCapacity) {
				err = nil // full: nothing left to commit ahead
			}
			return done, err
		}
	}
	return done, nil
}

// pcChunk is a chunk of a Precommit batch and the runs of it to commit.
type pcChunk struct {
	r    *region
	i    int
	runs []gspan
}

// precommitBatch commits the uncommitted granules of a batch of free chunks, about want bytes'
// worth at most, reserving a region when no free chunk has any, and returns the bytes it
// committed.
func (a *Arena) precommitBatch(want uintptr) (uintptr, error) {
	a.pcMu.Lock()
	defer a.pcMu.Unlock()
	cs, err := a.precommitTake(want)
	if len(cs) == 0 {
		return 0, err
	}
	start := time.Now()
	// Per chunk whose commit failed: what the provider refused to undo.
	kept := make([][]gspan, len(cs))
	errs := a.fanout(len(cs), func(i int) error {
		var err error
		if len(cs) > 1 {
			// The batch is the parallelism: no workers of workers.
			kept[i], err = a.commitSerial(cs[i].runs)
		} else {
			_, kept[i], err = a.commitSpans(cs[i].runs)
		}
		if err != nil {
			return fmt.Errorf("precommit: %w", err)
		}
		return nil
	})
	took := time.Since(start)

	a.mu.Lock()
	defer a.mu.Unlock()
	var n uintptr
	for i := range cs {
		c := &cs[i]
		c.r.used.SetRange(c.i, c.i+1, false)
		if errs != nil && errs[i] != nil {
			a.keepCommitted(kept[i])
			continue
		}
		for _, x := range c.runs {
			c.r.commit.SetRange(x.s, x.e, true)
			n += uintptr(x.e-x.s) << c.r.gshift
			a.st.Commits++
		}
		c.r.stamp[c.i] = keepStamp
		c.r.stale.SetRange(c.i, c.i+1, true) // Trim and forced purges look at it
	}
	for i := range cs {
		a.emptied(cs[i].r) // a lent region reserved for the batch holds no chunk now (lend.go)
	}
	a.pcHeld -= len(cs)
	a.pcDone.Broadcast()
	a.st.Committed += uint64(n)
	a.st.PeakCommitted = max(a.st.PeakCommitted, a.st.Committed)
	if n > 0 {
		a.st.CommitBytes += uint64(n)
		a.st.CommitTime += took
	}
	a.st.Precommitted += uint64(n)
	return n, firstError(errs)
}

// precommitTake chooses the chunks of a batch (a region reserved when no free chunk has
// uncommitted granules, unless the provider's regions come committed) and marks them in use,
// so that no span takes them while they are committed. It returns no chunk and the reason when
// there is none to take.
func (a *Arena) precommitTake(want uintptr) ([]pcChunk, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	k := max(min(a.workers*precommitPerWorker, int((want+a.chunk-1)>>a.shift)), 1)
	var cs []pcChunk
	for _, r := range *a.regions.Load() {
		cs = a.uncommittedFree(r, cs, k)
	}
	if len(cs) == 0 {
		if a.committedRegions {
			return nil, nil // a region reserved would come committed: nothing to commit in it
		}
		r, err := a.grow(a.chunk, a.chunk)
		if err != nil {
			return nil, err
		}
		if cs = a.uncommittedFree(r, cs, k); len(cs) == 0 {
			a.emptied(r) // committed at reserve: nothing to commit, and a lent region goes back
			return nil, nil
		}
	}
	for _, c := range cs {
		c.r.used.SetRange(c.i, c.i+1, true)
	}
	a.pcHeld += len(cs)
	return cs, nil
}

// uncommittedFree appends to cs, up to k in all, the free chunks of r with uncommitted
// granules, with the runs of them to commit.
func (a *Arena) uncommittedFree(r *region, cs []pcChunk, k int) []pcChunk {
	if r.r.Committed {
		return cs
	}
	n := r.nchunks
	for i := r.used.Next(0, n, false); i < n && len(cs) < k; i = r.used.Next(i+1, n, false) {
		glo, ghi := a.ownGranules(r, i, i+1, false)
		if r.commit.Count(glo, ghi) == ghi-glo {
			continue
		}
		c := pcChunk{r: r, i: i}
		_ = r.commit.Runs(glo, ghi, false, func(s, e int) error {
			c.runs = append(c.runs, gspan{r, s, e})
			return nil
		})

		cs = append(cs, c)
	}
	return cs
}
