package main

import (
	"runtime"
	"slices"
	"time"
)

// contender is one runner measured against others by interleave; unit is what its n must be a
// multiple of (see calibrate).
type contender struct {
	run  runner
	unit int
}

// outcome is what interleave measured for one contender, or why it could not.
type outcome struct {
	m   measurement
	err error
}

// interleave measures contenders against one another. Each is calibrated alone (calibrate),
// then cfg.reps rounds run every contender once, in an order that turns by one each round.
// A contender's ns per operation is the median of its rounds: a slowdown of the machine
// (another process, a neighbour on a shared VM, the CPU's clock) lands on every contender
// alike instead of on whichever ran during it, and the median drops the rounds it spoiled.
// CPU time and GC share are summed over all its rounds. A contender that fails leaves the
// rounds with its error.
//
// Each timed run is preceded, untimed, by a garbage collection, so that no contender pays for
// another's garbage, and by a warm-up a sixteenth as long, so that it starts from its own
// steady state and not from what the others left: caches, and memory purged while it waited
// (a pinmalloc arena gives back memory idle for 10 ms, and the pool then pays one or two
// pairs of 60 ms to commit a 256 MiB block again). A contender whose run is a single unit
// (mmap+mlock of 256 MiB) has no warm-up: it would double the round's time for an operation
// that long.
//
// Every round of one comparison runs on one CPU (onOneCPU): the contenders meet the same
// core, whatever its neighbours do to it, rather than whichever vCPU the thread was on.
func interleave(cfg *config, cs []contender) []outcome {
	undo := onOneCPU()
	defer undo()
	out := make([]outcome, len(cs))
	ns := make([]int, len(cs)) // operations per run
	for i, c := range cs {
		ns[i], out[i].err = calibrate(cfg, c.run, c.unit)
	}
	perOp := make([][]float64, len(cs))
	cpu := make([]time.Duration, len(cs))
	gc, busy := make([]float64, len(cs)), make([]float64, len(cs))
	for round := range cfg.reps {
		for k := range cs {
			i := (k + round) % len(cs)
			if out[i].err != nil {
				continue
			}
			runtime.GC()
			if ns[i] > cs[i].unit { // a run of one unit is as long as a round: no warm-up
				if _, err := cs[i].run(roundUp(ns[i]/16, cs[i].unit)); err != nil {
					out[i].err = err
					continue
				}
			}
			cpu0, gc0 := sampleCPU()
			d, err := cs[i].run(ns[i])
			cpu1, gc1 := sampleCPU()
			if err != nil {
				out[i].err = err
				continue
			}
			perOp[i] = append(perOp[i], float64(d.Nanoseconds())/float64(ns[i]))
			cpu[i] += cpu1.process - cpu0.process
			gc[i] += gc1.gc - gc0.gc
			busy[i] += gc1.busy - gc0.busy
		}
	}
	for i := range cs {
		if out[i].err != nil {
			continue
		}
		ops := float64(ns[i]) * float64(len(perOp[i]))
		out[i].m = measurement{
			spread:     roundSpread(perOp[i]),
			nsPerOp:    median(perOp[i]),
			cpuNsPerOp: float64(cpu[i].Nanoseconds()) / ops,
			gcFraction: fraction(gc[i], busy[i]),
		}
	}
	return out
}

// median returns the middle of xs (the mean of the middle two for an even count); xs is
// sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 0 {
		return (xs[m-1] + xs[m]) / 2
	}
	return xs[m]
}
