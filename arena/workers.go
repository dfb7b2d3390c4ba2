package arena

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// # Parallel commit
//
// Pinning memory is the slow part of an arena's life: the CUDA driver creates, maps and grants
// a 2 MiB host granule in 0.4–0.77 ms (H100), so one GiB costs 200–385 ms on one thread, and a
// registration faults in and pins every page it covers. Work on separate granules is
// independent, so the arena spreads it over a bounded set of workers:
//
//   - Precommit commits a batch of free chunks at a time, one task per chunk (precommit.go);
//   - Alloc and Commit, when a span needs at least parallelMin bytes committed, cut the
//     uncommitted runs into one piece per worker: each piece is committed by its own provider
//     call where the provider allows it (Caps.Splits: VMM granules, mlocked pages), or, for a
//     provider that must commit a span in one call (a registration: Prefaulter), the pieces
//     are faulted in by the workers and the span is then committed in one call that finds its
//     pages present;
//   - the purge (the timer, Trim, Close, forced purges) decommits its runs the same way, where
//     the provider splits.
//
// The workers of one operation are goroutines started for it, at most Options.CommitWorkers
// (the caller's own goroutine waits for them). Operations that run them are serialized by the
// arena's locks (Alloc, Commit and the purge hold a.mu; Precommit holds pcMu and commits
// without a.mu), so at most two sets run at once: Precommit's and one allocation's. A worker
// runs its tasks inside the provider's thread setup (Threaded: for the CUDA providers, an OS
// thread locked with the device's primary context current, set up once for all its tasks).
//
// Failure: every operation is all-or-nothing per provider call, and the arena undoes its own
// successful calls when one of the operation's fails (a span's commit leaves nothing new
// committed; a precommit batch keeps the chunks that succeeded and stops). A provider whose
// calls fail midway undoes what that call did (package cudamem: vmm.go, hostregister.go).

// DefaultCommitWorkers is Options.CommitWorkers' default. The published measurement of
// parallel first touch before cudaHostRegister on real hardware found no gain past 4 threads
// (cudf#23457). The bench's commit case cannot decide beyond that without a GPU: on the
// 2-vCPU build machine page faults did not get faster with threads at all (while a CPU-bound
// control ran twice as fast on 2), and the fake's H100 model, a sleep per granule that
// assumes a driver serializing nothing, gains at every count by construction (3.3x at 4, 5.3x
// at 8 workers), as far as the Go runtime lets that many threads wait in the driver at once:
// past GOMAXPROCS, a worker in a driver call keeps its P until sysmon takes it back. 4 takes
// the measured gain and bounds the CPU a background precommit takes from a serving process;
// the bench's 8-worker figure on the H100 says whether the real driver earns more.
const DefaultCommitWorkers = 4

// MaxCommitWorkers bounds Options.CommitWorkers.
const MaxCommitWorkers = 64

// parallelMin is the least a span's commit (or a purge's decommit) must move for the arena to
// spread it over workers: below it one provider call costs less than starting goroutines.
const parallelMin = 4 << 20

// pieceMin is the smallest piece a range is cut into for the workers (and at least a granule).
const pieceMin = 2 << 20

// gspan is a run of granules [s, e) of a region: a unit of work for the workers.
type gspan struct {
	r    *region
	s, e int
}

// fanout runs task(i) for every i in [0, n) on at most a.workers goroutines and returns the
// tasks' errors, indexed like the tasks (nil when every task succeeded). With one worker, or
// one task, it runs them on the calling goroutine.
func (a *Arena) fanout(n int, task func(i int) error) []error {
	var errs []error
	fail := func(i int, err error) {
		if errs == nil {
			errs = make([]error, n)
		}
		errs[i] = err
	}
	w := min(a.workers, n)
	if w <= 1 {
		for i := range n {
			if err := task(i); err != nil {
				fail(i, err)
			}
		}
		return errs
	}
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = a.onThread(func() error {
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					if err := task(i); err != nil {
						mu.Lock()
						fail(i, err)
						mu.Unlock()
					}
				}
				return nil
			})
		}()
	}
	wg.Wait()
	return errs
}

// onThread runs f inside the provider's thread setup, if it has one.
func (a *Arena) onThread(f func() error) error {
	if a.threaded != nil {
		if err := a.threaded.OnThread(f); err != nil {
			// The setup failed (a closed device): run f anyway, so that its calls report why.
			runtime.Gosched()
			return f()
		}
		return nil
	}
	return f()
}

// pieces cuts the runs rs into pieces for the workers: about a.workers of them, each at least
// pieceMin bytes and a whole number of granules, none crossing a run's end.
func (a *Arena) pieces(rs []gspan) []gspan {
	total := 0
	for _, x := range rs {
		total += x.e - x.s
	}
	gshift := rs[0].r.gshift
	minG := max(int(pieceMin>>gshift), 1)
	per := max((total+a.workers-1)/a.workers, minG)
	var out []gspan
	for _, x := range rs {
		for s := x.s; s < x.e; s += per {
			out = append(out, gspan{x.r, s, min(s+per, x.e)})
		}
	}
	return out
}

// bytesOf is the memory of the runs rs.
func bytesOf(rs []gspan) uintptr {
	var n uintptr
	for _, x := range rs {
		n += uintptr(x.e-x.s) << x.r.gshift
	}
	return n
}

// parallel reports whether runs rs are worth spreading over workers.
func (a *Arena) parallel(rs []gspan) bool {
	return a.workers > 1 && len(rs) > 0 && bytesOf(rs) >= parallelMin
}

// commitSpans commits the runs rs (uncommitted granules) with the provider, on the workers
// when it pays, and returns the provider calls that committed them. On error nothing of rs is
// left committed but kept: what was committed before the failure is given back, and kept is
// what the provider refused to give back, still committed (the caller records it so). Called
// with a.mu held, or by Precommit on chunks it holds (the workers do not take it).
func (a *Arena) commitSpans(rs []gspan) (calls int, kept []gspan, err error) {
	if !a.parallel(rs) || (!a.caps.Splits && a.prefaulter == nil) {
		kept, err := a.commitSerial(rs)
		return len(rs), kept, err
	}
	ps := a.pieces(rs)
	if a.prefaulter != nil && !a.caps.Splits {
		errs := a.fanout(len(ps), func(i int) error {
			return a.prefaulter.Prefault(ps[i].r.r, uintptr(ps[i].s)<<ps[i].r.gshift, uintptr(ps[i].e-ps[i].s)<<ps[i].r.gshift)
		})
		if err := firstError(errs); err != nil {
			a.decommitSpans(ps) // what was prefaulted goes back (prefaulted is not committed)
			return 0, nil, err
		}
		if i, err := a.commitRuns(rs); err != nil {
			kept := a.decommitSpans(rs[:i]) // committed: what is refused stays so
			a.decommitSpans(rs[i:])         // prefaulted only (the failed run undid its own commit)
			return 0, kept, err
		}
		return len(rs), nil, nil
	}
	errs := a.fanout(len(ps), func(i int) error {
		return a.prov.Commit(ps[i].r.r, uintptr(ps[i].s)<<ps[i].r.gshift, uintptr(ps[i].e-ps[i].s)<<ps[i].r.gshift)
	})
	if err := firstError(errs); err != nil {
		var done []gspan
		for i, p := range ps {
			if errs[i] == nil {
				done = append(done, p)
			}
		}
		kept := a.decommitSpans(done)
		if Exhausted(err) {
			// Refused for want of memory while the other pieces held theirs: once they are
			// given back, commit the runs one call each, which either fits or says exactly
			// how much the whole asked and how much is free. What the provider kept is
			// committed already.
			more, err := a.commitSerial(subtract(rs, kept))
			if err != nil {
				return 0, append(kept, more...), err
			}
			return len(rs), nil, nil
		}
		return 0, kept, err
	}
	return len(ps), nil, nil
}

// commitSerial commits rs one after the other on the calling goroutine, undoing its own
// commits when one fails; kept is what the provider refused to undo, still committed.
func (a *Arena) commitSerial(rs []gspan) (kept []gspan, err error) {
	i, err := a.commitRuns(rs)
	if err != nil {
		return a.decommitSpans(rs[:i]), err
	}
	return nil, nil
}

// commitRuns commits rs one after the other on the calling goroutine and stops at the first
// that fails, whose index it returns with the error; it undoes nothing.
func (a *Arena) commitRuns(rs []gspan) (int, error) {
	for i, x := range rs {
		if err := a.prov.Commit(x.r.r, uintptr(x.s)<<x.r.gshift, uintptr(x.e-x.s)<<x.r.gshift); err != nil {
			return i, err
		}
	}
	return len(rs), nil
}

// decommitSpans gives rs back to the provider (undoing commits or prefaults the arena has not
// recorded), on the workers when the provider splits, and returns the pieces the provider
// refused, in order: they are still committed (a decommit left unfinished is not refused: see
// ErrDecommitUnfinished). The errors themselves are dropped: it runs after a failure, and the
// provider has reported what went wrong.
func (a *Arena) decommitSpans(rs []gspan) (refused []gspan) {
	if len(rs) == 0 {
		return nil
	}
	decommit := func(x gspan) error {
		err := a.prov.Decommit(x.r.r, uintptr(x.s)<<x.r.gshift, uintptr(x.e-x.s)<<x.r.gshift)
		if errors.Is(err, ErrDecommitUnfinished) {
			return nil // uncommitted all the same
		}
		return err
	}
	if !a.caps.Splits || !a.parallel(rs) {
		for _, x := range rs {
			if decommit(x) != nil {
				refused = append(refused, x)
			}
		}
		return refused
	}
	ps := a.pieces(rs)
	errs := a.fanout(len(ps), func(i int) error { return decommit(ps[i]) })
	for i, err := range errs {
		if err != nil {
			refused = append(refused, ps[i])
		}
	}
	return refused
}

// subtract returns the runs rs less the pieces ks, which lie inside them; both are sorted and
// of one region.
func subtract(rs, ks []gspan) []gspan {
	if len(ks) == 0 {
		return rs
	}
	var out []gspan
	j := 0
	for _, x := range rs {
		s := x.s
		for ; j < len(ks) && ks[j].s < x.e; j++ {
			if ks[j].s > s {
				out = append(out, gspan{x.r, s, ks[j].s})
			}
			s = max(s, ks[j].e)
		}
		if s < x.e {
			out = append(out, gspan{x.r, s, x.e})
		}
	}
	return out
}

// keepCommitted records the pieces ks of a failed commit, which the provider refused to give
// back, as what they are: committed, and unwanted (claimed by no span), so that a later commit
// does not commit them twice and the purge gives them back. Called with a.mu held.
func (a *Arena) keepCommitted(ks []gspan) {
	for _, x := range ks {
		r := x.r
		r.commit.SetRange(x.s, x.e, true)
		r.dirty.SetRange(x.s, x.e, true)
		a.st.Committed += uint64(x.e-x.s) << r.gshift
		lo, hi := uintptr(x.s)<<r.gshift+r.r.Base, uintptr(x.e)<<r.gshift+r.r.Base
		first := int((max(lo, r.grid) - r.grid) >> a.shift)
		last := min(int((hi-1-r.grid)>>a.shift)+1, r.nchunks)
		a.markUnwanted(r, first, last)
	}
	a.st.PeakCommitted = max(a.st.PeakCommitted, a.st.Committed)
}

// firstError returns the first error of errs, or nil.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
