package main

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runner runs n operations of a workload (n alloc+free pairs) and returns the time they took,
// as measured by the implementation itself: set-up and tear-down are not included. Every
// implementation, Go or C, is timed through a runner, so all share the one harness below.
type runner func(n int) (time.Duration, error)

// measurement is the outcome of measure.
type measurement struct {
	nsPerOp    float64 // elapsed / operations: the mean of the repetitions (measure), the median of the rounds (interleave)
	cpuNsPerOp float64 // process CPU time (user + system, every thread) per operation
	gcFraction float64 // share of the Go runtime's busy CPU time spent in the GC
	spread     float64 // how far its rounds disagree (interleave; noise.go), 0 when not in rounds
}

// opsPerSec converts the time per operation into a rate.
func (m measurement) opsPerSec() float64 { return 1e9 / m.nsPerOp }

// measure calibrates n so that one run takes about cfg.target, then runs cfg.reps repetitions
// and reports their mean, not their median: a GC cycle or a purge that lands in one
// repetition is part of the cost. The suite's own cases, and the GPU pair cases, measure
// through interleave instead (interleave.go), and so do the GPU copy-bandwidth and copy
// engine cases; measure serves the staging case (gpu_anchors.go), which times one source at a
// time.
func measure(cfg *config, r runner, unit int) (measurement, error) {
	n, err := calibrate(cfg, r, unit)
	if err != nil {
		return measurement{}, err
	}
	var elapsed time.Duration
	cpu0, gc0 := sampleCPU()
	for range cfg.reps {
		d, err := r(n)
		if err != nil {
			return measurement{}, err
		}
		elapsed += d
	}
	cpu1, gc1 := sampleCPU()
	total := int64(n) * int64(cfg.reps)
	return measurement{
		nsPerOp:    float64(elapsed.Nanoseconds()) / float64(total),
		cpuNsPerOp: float64((cpu1.process - cpu0.process).Nanoseconds()) / float64(total),
		gcFraction: fraction(gc1.gc-gc0.gc, gc1.busy-gc0.busy),
	}, nil
}

// calibrate returns the n, a multiple of unit (the goroutine count, the batch length), for
// which one run of r takes about cfg.target. Its runs double as warm-up. A run long enough
// to decide n is run twice more and the shortest of the three counts, and n grows on if
// that one is short: the others paid for first touches or commits (the pool commits a
// 256 MiB block anew on each of its first two pairs).
func calibrate(cfg *config, r runner, unit int) (int, error) {
	n := unit
	var d time.Duration
	for {
		var err error
		if d, err = r(n); err != nil {
			return 0, err
		}
		for k := 0; k < 2 && d >= cfg.target/8; k++ {
			again, err := r(n)
			if err != nil {
				return 0, err
			}
			d = min(d, again)
		}
		if d >= cfg.target/8 || n >= 1<<40 {
			break
		}
		grow := 100.0
		if d > 0 {
			grow = min(100, max(2, 1.5*float64(cfg.target/8)/float64(d)))
		}
		n = roundUp(int(float64(n)*grow), unit)
	}
	return roundUp(max(1, int(float64(n)*float64(cfg.target)/float64(max(d, 1)))), unit), nil
}

func roundUp(n, unit int) int { return (n + unit - 1) / unit * unit }

func fraction(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return part / whole
}

// cpuSample is the process CPU time from getrusage.
type cpuSample struct{ process time.Duration }

// gcSample is the runtime's own CPU accounting (runtime/metrics /cpu/classes), in seconds.
type gcSample struct{ gc, busy float64 }

var cpuMetrics = []metrics.Sample{
	{Name: "/cpu/classes/gc/total:cpu-seconds"},
	{Name: "/cpu/classes/total:cpu-seconds"},
	{Name: "/cpu/classes/idle:cpu-seconds"},
}

// sampleCPU reads the process CPU time and the runtime's GC CPU accounting. The runtime
// counts GC time in its own units (an estimate over GOMAXPROCS), so GC time is only ever
// compared with the runtime's busy time, never with getrusage.
func sampleCPU() (cpuSample, gcSample) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	proc := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	metrics.Read(cpuMetrics)
	v := func(i int) float64 {
		if cpuMetrics[i].Value.Kind() != metrics.KindFloat64 {
			return 0
		}
		return cpuMetrics[i].Value.Float64()
	}
	return cpuSample{proc}, gcSample{gc: v(0), busy: v(1) - v(2)}
}

// job is one goroutine's part of a parallel run: it does its own set-up, waits at the
// barrier, runs its timed part and returns when that part began and ended (set-up excluded).
type job func(b *barrier) (span, error)

// span is the timed part of a job, on CLOCK_MONOTONIC in ns: the clock the C loops read.
type span struct{ start, end int64 }

// monotonic reads CLOCK_MONOTONIC, in ns.
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// barrier releases the jobs of a parallel run together, once all have done their set-up.
// C loops wait on it too, through the address of arrived.
type barrier struct {
	arrived int64 // jobs that reached the barrier; read and written atomically
	parties int64
}

// wait returns once every party has arrived.
func (b *barrier) wait() {
	atomic.AddInt64(&b.arrived, 1)
	for atomic.LoadInt64(&b.arrived) < b.parties {
		runtime.Gosched()
	}
}

// parallel runs jobs on as many goroutines, released together by a barrier, and returns the
// time from the first timed part's start to the last one's end: the wall time of the run,
// even where a busy machine does not run the jobs all at once. (The longest timed part would
// not be: jobs run one after the other would read as perfect scaling.)
func parallel(jobs []job) (time.Duration, error) {
	b := &barrier{parties: int64(len(jobs))}
	spans := make([]span, len(jobs))
	errs := make([]error, len(jobs))
	if len(jobs) == 1 {
		spans[0], errs[0] = jobs[0](b)
	} else {
		var wg sync.WaitGroup
		for i, j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spans[i], errs[i] = j(b)
			}()
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	first, last := spans[0].start, spans[0].end
	for _, sp := range spans[1:] {
		first, last = min(first, sp.start), max(last, sp.end)
	}
	return time.Duration(last - first), nil
}

// firstErr keeps the first error of a loop that goes on after one (freeing what it holds).
func firstErr(err *error, e error) {
	if *err == nil {
		*err = e
	}
}

// errAllocFailed is what a C loop's -1 becomes.
var errAllocFailed = errors.New("allocation failed")

// cResult turns a C loop's return value (elapsed ns, or -1) into a duration or an error.
func cResult(ns int64, what string) (time.Duration, error) {
	if ns < 0 {
		return 0, fmt.Errorf("%s: %w", what, errAllocFailed)
	}
	return time.Duration(ns), nil
}
