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

// Precommit commits up to size bytes of free chunks ahead of need, so that later allocations
// find their memory committed (and pinned, for pinned memory). It works a chunk at a time and
// holds the arena's lock only to choose a chunk and to record it: allocation goes on while the
// provider commits, and never waits for Precommit. Precommitted memory stays committed until a
// span takes it, Trim, a refused commit that needs the memory, or Close. Precommit reserves
// regions as it needs them, up to the capacity, where it stops without error. It returns the
// bytes it committed and the first error (ErrClosed when the arena closed meanwhile). It is
// meant to run in a goroutine of its own at startup.
func (a *Arena) Precommit(size uintptr) (uintptr, error) {
	var done uintptr
	for done < size {
		n, err := a.precommitChunk()
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

// precommitChunk commits the uncommitted granules of one free chunk, reserving a region when no
// free chunk has any, and returns the bytes it committed.
func (a *Arena) precommitChunk() (uintptr, error) {
	a.pcMu.Lock()
	defer a.pcMu.Unlock()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return 0, ErrClosed
	}
	r, i := a.uncommittedFreeChunk()
	if r == nil {
		var err error
		if r, err = a.grow(a.chunk, a.chunk); err != nil {
			a.mu.Unlock()
			return 0, err
		}
		i = 0
	}
	// The chunk is marked in use while the provider commits, so that no span takes it; the
	// runs to commit are read now, under the lock.
	r.used.setRange(i, i+1, true)
	glo, ghi := a.chunkGranules(r, i)
	var runs [][2]int
	_ = r.commit.runs(glo, ghi, false, func(s, e int) error {
		runs = append(runs, [2]int{s, e})
		return nil
	})
	a.mu.Unlock()

	start := time.Now()
	var err error
	var done [][2]int
	for _, run := range runs {
		if err = a.prov.Commit(r.r, uintptr(run[0])<<r.gshift, uintptr(run[1]-run[0])<<r.gshift); err != nil {
			err = fmt.Errorf("precommit: %w", err)
			break
		}
		done = append(done, run)
	}
	took := time.Since(start)

	a.mu.Lock()
	defer a.mu.Unlock()
	var n uintptr
	for _, d := range done {
		r.commit.setRange(d[0], d[1], true)
		n += uintptr(d[1]-d[0]) << r.gshift
		a.st.Commits++
	}
	a.st.Committed += uint64(n)
	a.st.PeakCommitted = max(a.st.PeakCommitted, a.st.Committed)
	a.st.CommitBytes += uint64(n)
	a.st.CommitTime += took
	a.st.Precommitted += uint64(n)
	r.used.setRange(i, i+1, false)
	if n > 0 {
		r.stamp[i] = keepStamp
		r.stale.setRange(i, i+1, true) // Trim and forced purges look at it
	}
	return n, err
}

// uncommittedFreeChunk returns a free chunk with uncommitted granules, or nil.
func (a *Arena) uncommittedFreeChunk() (*region, int) {
	for _, r := range *a.regions.Load() {
		if r.r.Committed {
			continue
		}
		for i := r.used.next(0, r.nchunks, false); i < r.nchunks; i = r.used.next(i+1, r.nchunks, false) {
			if glo, ghi := a.chunkGranules(r, i); r.commit.count(glo, ghi) < ghi-glo {
				return r, i
			}
		}
	}
	return nil, 0
}
