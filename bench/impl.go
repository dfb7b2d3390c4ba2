package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/alloctrace"
)

// impl is one allocator under test. Each workload field builds the runner for one kind of
// case; a nil field means the allocator does not take part in that kind (a C allocator has
// no Go-side trace, only a fixed-capacity pool can take the huge-object case).
type impl struct {
	name string
	// skip, when set, says why the allocator is not measured in this build.
	skip string
	// found names the library a C allocator was loaded from, with its version.
	found string
	// harness names the null allocator (null.go) that runs through the same loops as this
	// one: what the loops themselves cost, which the harness-adjusted figures take off. A
	// null allocator names itself.
	harness string
	// pair builds the fixed-size alloc+free workload.
	pair func(size int) (workload, error)
	// mixed builds the churn workload over ops on the given number of goroutines.
	mixed func(ops []uint32, goroutines int) (workload, error)
	// prodcons builds the allocate-here, free-there workload over ops.
	prodcons func(ops []uint32) (workload, error)
	// churn builds the workload that keeps live blocks of size bytes and replaces a random
	// one each operation (churn.go).
	churn func(live, size int) (workload, error)
	// trace replays the serving trace and samples the memory it holds.
	trace func(tr *trace) (*traceResult, error)
	// huge makes one allocation of size bytes in a pool of fixed capacity.
	huge func(capacity, size int64) hugeResult
	// replay plays a recorded trace (replay.go) in an allocator of the given capacity.
	replay func(evs []alloctrace.Event, capacity int64) (*replayResult, error)
	// larson runs a footprint case's churn and samples what the allocator holds (footprint.go).
	larson func(sh larsonShape, steps int, idle time.Duration) (larsonResult, error)
	// maxPair, when set, is the largest fixed-size pair the allocator runs: one that locks
	// each buffer itself, under a low memlock limit (memlock.go).
	maxPair int64
}

// selfLocking bounds an allocator that locks its buffers itself to what the memlock limit
// allows: under a low limit, only the pairs whose buffer fits it, and none of the cases that
// hold many buffers at once.
func selfLocking(im impl) impl {
	if hostMemory.maxPair > 0 {
		im.maxPair = hostMemory.maxPair
		im.mixed, im.prodcons, im.churn, im.trace, im.huge, im.replay, im.larson = nil, nil, nil, nil, nil, nil, nil
	}
	return im
}

// workload is a runner and the resources it holds for the length of a case.
type workload struct {
	run   runner
	close func() error
}

// hugeResult is the outcome of one huge allocation.
type hugeResult struct {
	ok   bool
	ns   float64 // time to allocate and touch the block
	err  error   // why it failed
	note string  // anything worth saying when it succeeded
}

// noClose is the close of a workload that holds nothing.
func noClose() error { return nil }

// parallelRunner returns a runner that splits n operations over g goroutines, each running
// one(i, share, barrier) for its share, and times them with parallel.
func parallelRunner(g int, one func(i, n int, b *barrier) (span, error)) runner {
	return func(n int) (time.Duration, error) {
		jobs := make([]job, g)
		for i := range jobs {
			jobs[i] = func(b *barrier) (span, error) { return one(i, n/g, b) }
		}
		return parallel(jobs)
	}
}

// cLoops are the timed loops of one C allocator (see cloops.h). Each returns the elapsed
// nanoseconds, or -1 when an allocation failed; mixed also when its timed part began
// (CLOCK_MONOTONIC).
type cLoops struct {
	pair     func(size, n int) int64
	mixed    func(ops []uint32, n int, b *barrier) (start, ns int64)
	prodcons func(ops []uint32, n int) int64
	// replay and larson also return what the allocator held before the case
	// (<prefix>_baseline in cloops.h), which their figures include.
	replay func(ev []uint64, nalloc int) (ns int64, peakHeld, baseline uint64)
	// churn allocates live blocks of size bytes and returns the loop that churns them and the
	// function that frees them, or ok false when an allocation failed (having freed the rest).
	churn func(live, size int) (loop func(n int) int64, release func(), ok bool)
	// larson runs a footprint case (footprint.go): ns -1 when an allocation failed.
	larson func(threads, slots, lo, hi, steps, idleMs int) (ns int64, held [3]int64, live, baseline int64)
}

// cImpl builds the impl of a C allocator from its loops.
func cImpl(name string, l cLoops) impl {
	var larson func(larsonShape, int, time.Duration) (larsonResult, error)
	if l.larson != nil {
		larson = cLarson(l.larson)
	}
	var replay func([]alloctrace.Event, int64) (*replayResult, error)
	if l.replay != nil {
		replay = func(evs []alloctrace.Event, _ int64) (*replayResult, error) {
			return cReplay(l.replay, evs)
		}
	}
	if cFootprintImpl(name) != nil && !inFootprintChild() {
		// What the allocator holds is the process's: measured in a fresh one (cchild.go).
		if larson != nil {
			larson = larsonInChild(name)
		}
		if replay != nil {
			replay = replayInChild(name)
		}
	}
	return impl{
		larson:  larson,
		replay:  replay,
		name:    name,
		harness: "null-c",
		pair: func(size int) (workload, error) {
			return workload{run: func(n int) (time.Duration, error) {
				return cResult(l.pair(size, n), "pair")
			}, close: noClose}, nil
		},
		mixed: func(ops []uint32, g int) (workload, error) {
			return workload{run: parallelRunner(g, func(_, n int, b *barrier) (span, error) {
				start, ns := l.mixed(ops, n, b)
				d, err := cResult(ns, "mixed")
				return span{start, start + int64(d)}, err
			}), close: noClose}, nil
		},
		prodcons: func(ops []uint32) (workload, error) {
			return workload{run: func(n int) (time.Duration, error) {
				return cResult(l.prodcons(ops, n), "prodcons")
			}, close: noClose}, nil
		},
		churn: func(live, size int) (workload, error) {
			loop, release, ok := l.churn(live, size)
			if !ok {
				return workload{}, fmt.Errorf("allocating %d live blocks of %d B: %w", live, size, errAllocFailed)
			}
			return workload{run: func(n int) (time.Duration, error) {
				return cResult(loop(n), "churn")
			}, close: func() error { release(); return nil }}, nil
		},
	}
}

// Capacities of the pools the Go-side allocators open. Only pinmalloc uses them; the others
// have no fixed capacity.
const (
	caseCapacity  = 1 << 30 // pair, mixed and producer/consumer cases
	traceCapacity = 2 << 30 // the serving trace (peak live is about 0.3 GiB)
)

// goImpl builds the impl of a Go-callable allocator from the function that opens one for a
// case. Every Go-side allocator goes through the same loops (goloops.go).
func goImpl[H any](name string, open func(capacity int64) (allocator[H], error)) impl {
	return impl{
		name:    name,
		harness: harnessOf[H](),
		pair: func(size int) (workload, error) {
			a, err := open(caseCapacity)
			if err != nil {
				return workload{}, err
			}
			return workload{run: func(n int) (time.Duration, error) {
				return pairLoop(a, size, n)
			}, close: a.close}, nil
		},
		mixed: func(ops []uint32, g int) (workload, error) {
			workers, owned, err := openWorkers(open, g)
			if err != nil {
				return workload{}, err
			}
			return workload{run: parallelRunner(g, func(i, n int, b *barrier) (span, error) {
				return mixedLoop(workers[i], ops, n, b)
			}), close: func() error { return closeAll(owned) }}, nil
		},
		prodcons: func(ops []uint32) (workload, error) {
			w, owned, err := openWorkers(open, 2) // a producer and a consumer
			if err != nil {
				return workload{}, err
			}
			return workload{run: func(n int) (time.Duration, error) {
				return prodconsLoop(w[0], w[1], ops, n)
			}, close: func() error { return closeAll(owned) }}, nil
		},
		churn: func(live, size int) (workload, error) {
			a, err := open(max(caseCapacity, churnCapacity(live, size)))
			if err != nil {
				return workload{}, err
			}
			return openChurn(a, live, size)
		},
		replay: func(evs []alloctrace.Event, capacity int64) (*replayResult, error) {
			a, err := open(capacity)
			if err != nil {
				return nil, err
			}
			res, err := replayLoop(a, evs)
			return res, errors.Join(err, a.close())
		},
		trace: func(tr *trace) (*traceResult, error) {
			a, err := open(traceCapacity)
			if err != nil {
				return nil, err
			}
			res, err := traceLoop(a, tr)
			return res, errors.Join(err, a.close())
		},
		larson: func(sh larsonShape, steps int, idle time.Duration) (larsonResult, error) {
			return goLarson(open, sh, steps, idle)
		},
		huge: func(capacity, size int64) hugeResult {
			a, err := open(capacity)
			if err != nil {
				return hugeResult{err: err}
			}
			r := hugeLoop(a, size)
			if err := a.close(); err != nil && r.err == nil {
				r.err = err
			}
			return r
		},
	}
}

// openWorkers opens one allocator and gives each of g goroutines its own: a fork for a
// single-owner allocator, the same one for a goroutine-safe allocator. owned lists what to
// close, the opened one first.
func openWorkers[H any](open func(int64) (allocator[H], error), g int) (workers, owned []allocator[H], err error) {
	a, err := open(caseCapacity)
	if err != nil {
		return nil, nil, err
	}
	owned = []allocator[H]{a}
	workers = make([]allocator[H], g)
	for i := range workers {
		workers[i] = a
	}
	f, single := a.(forker[H])
	for i := 1; single && i < g; i++ {
		b, err := f.fork()
		if err != nil {
			return nil, nil, errors.Join(err, closeAll(owned))
		}
		workers[i] = b
		owned = append(owned, b)
	}
	return workers, owned, nil
}

// closeAll closes what openWorkers opened, the forks before the allocator they came from.
func closeAll[H any](owned []allocator[H]) error {
	var errs []error
	for i := len(owned) - 1; i >= 0; i-- {
		errs = append(errs, owned[i].close())
	}
	return errors.Join(errs...)
}
