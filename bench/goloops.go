package main

import (
	"errors"
	"runtime"
	"time"
)

// allocator is what the Go-side loops drive. H is the handle the allocator hands out: a
// []byte for most, a uintptr for the pinmalloc heap. The loops call it through the interface,
// as a program holding any allocator would; a C allocator runs its own loops (cloops.h).
type allocator[H any] interface {
	alloc(n int) (H, error)
	free(h H) error
	// touch writes the first byte of the block, so that neither the compiler nor the kernel
	// can skip the allocation. The C loops do the same.
	touch(h H)
	// close releases the allocator and all its memory.
	close() error
}

// forker is implemented by single-owner allocators: fork returns a new allocator, sharing the
// receiver's memory, for another goroutine. Allocators without it are goroutine-safe.
type forker[H any] interface {
	fork() (allocator[H], error)
}

// footprinter is implemented by allocators that can say how much memory they hold. held is
// committed bytes for pinmalloc and the heap in use (HeapInuse) for the Go heap; resident
// adds, for the Go heap, the free heap memory not yet returned to the system (HeapIdle -
// HeapReleased), which pinmalloc counts in committed until its purge delay runs out.
type footprinter interface {
	footprint() (held, resident uint64)
}

// traceStat is a figure an allocator reports of itself after a trace: how it held what it held.
type traceStat struct {
	metric, unit string
	value        float64
}

// traceStatser is implemented by allocators that can say how they held their memory over a
// trace (where it came from, how often it was committed and given back), so that a report
// taken where the code cannot be debugged, a GPU host's, explains its footprint.
type traceStatser interface {
	traceStats() []traceStat
}

// Workload shape constants, shared with cloops.h (BENCH_SLOT_BITS, BENCH_BATCH, BENCH_RING).
const (
	slotBits = 10 // the churn table holds 1<<slotBits blocks
	batchLen = 64 // blocks per producer/consumer batch
	ringLen  = 16 // batches in flight between producer and consumer
)

// An op packs a slot index (the low slotBits bits) and a block size (the rest).
func opSlot(op uint32) int { return int(op & (1<<slotBits - 1)) }
func opSize(op uint32) int { return int(op >> slotBits) }

// pairLoop allocates, touches and frees one block of size bytes n times.
func pairLoop[H any](a allocator[H], size, n int) (time.Duration, error) {
	t0 := time.Now()
	for range n {
		h, err := a.alloc(size)
		if err != nil {
			return 0, err
		}
		a.touch(h)
		if err := a.free(h); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// mixedLoop fills a table of 1<<slotBits blocks, waits at the barrier, then n times frees
// the block in the op's slot and allocates the op's size into it. len(ops) is a power of two.
func mixedLoop[H any](a allocator[H], ops []uint32, n int, b *barrier) (sp span, err error) {
	var slots [1 << slotBits]H
	filled := 0
	mask := len(ops) - 1
	defer func() {
		for _, h := range slots[:filled] {
			firstErr(&err, a.free(h))
		}
	}()
	for i := range slots {
		if slots[i], err = a.alloc(opSize(ops[i&mask])); err != nil {
			b.wait()
			return span{}, err
		}
		filled++
	}
	b.wait()
	t0 := monotonic()
	for i := range n {
		op := ops[i&mask]
		s := opSlot(op)
		if err := a.free(slots[s]); err != nil {
			return span{}, err
		}
		h, err := a.alloc(opSize(op))
		if err != nil {
			return span{}, err
		}
		a.touch(h)
		slots[s] = h
	}
	return span{t0, monotonic()}, nil
}

// prodconsLoop allocates n blocks (whole batches) with a on the calling goroutine and frees them
// with consumer on another, passing batches of batchLen through a channel of ringLen. For a
// single-owner allocator the consumer is a fork, whose frees of a's blocks are remote frees.
func prodconsLoop[H any](a, consumer allocator[H], ops []uint32, n int) (time.Duration, error) {
	full := make(chan []H, ringLen)
	empty := make(chan []H, ringLen)
	for range ringLen {
		empty <- make([]H, batchLen)
	}
	mask := len(ops) - 1
	free := consumer.free
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		var err error
		for b := range full {
			for j, h := range b {
				firstErr(&err, free(h))
				var zero H
				b[j] = zero
			}
			empty <- b[:cap(b)]
		}
		done <- err
	}()
	var aerr error
	for i := 0; i < n && aerr == nil; {
		b := <-empty
		for j := range b {
			h, err := a.alloc(opSize(ops[i&mask]))
			if err != nil {
				aerr, b = err, b[:j]
				break
			}
			a.touch(h)
			b[j] = h
			i++
		}
		full <- b
	}
	close(full)
	ferr := <-done
	return time.Since(t0), errors.Join(aerr, ferr)
}

// tracePoint is one sample of the serving trace: bytes asked for and still live, and the
// allocator's footprint, after a step.
type tracePoint struct{ live, footprint uint64 }

// traceStep is the wall time of one trace step: about a thousand buffers a second, some
// 600 MB/s. The trace is paced so that time-based policies (pinmalloc's purge delay, the Go
// scavenger) see serving time, not the speed of a replay; the Go GC is paced by allocation
// and would see the same either way.
const traceStep = time.Millisecond

// traceResult is one allocator's replay of the serving trace.
type traceResult struct {
	impl          string
	peakLive      uint64
	peakFootprint uint64
	peakResident  uint64
	// sumLive and sumFootprint integrate live and footprint over the steps, for the
	// time-weighted mean ratio.
	sumLive, sumFootprint float64
	nsPerOp               float64 // allocation or free, sampling excluded
	gcFraction            float64
	wall                  time.Duration // the whole replay
	late                  int           // steps that began after their time (ops ran over)
	series                []tracePoint
	stats                 []traceStat // the allocator's own, at the end (traceStatser)
}

// traceLoop replays tr on a, one step each traceStep, freeing and allocating and sampling the
// footprint after every step. a must be a footprinter.
func traceLoop[H any](a allocator[H], tr *trace) (res *traceResult, err error) {
	fp, ok := a.(footprinter)
	if !ok {
		return nil, errors.New("allocator cannot report its footprint")
	}
	res = &traceResult{series: make([]tracePoint, tr.steps)}
	held := make([]H, len(tr.sizes))
	isHeld := make([]bool, len(tr.sizes))
	var live uint64
	var opTime time.Duration
	defer func() {
		for i, h := range held {
			if isHeld[i] {
				firstErr(&err, a.free(h))
			}
		}
	}()
	runtime.GC()
	_, gc0 := sampleCPU()
	start := time.Now()
	for t := range tr.steps {
		if d := time.Until(start.Add(time.Duration(t) * traceStep)); d > 0 {
			time.Sleep(d)
		} else if t > 0 {
			res.late++
		}
		t0 := time.Now()
		for _, i := range tr.frees[t] {
			if err := a.free(held[i]); err != nil {
				return nil, err
			}
			var zero H
			held[i], isHeld[i] = zero, false
			live -= uint64(tr.sizes[i])
		}
		for i := tr.start[t]; i < tr.start[t+1]; i++ {
			h, err := a.alloc(int(tr.sizes[i]))
			if err != nil {
				return nil, err
			}
			a.touch(h)
			held[i], isHeld[i] = h, true
			live += uint64(tr.sizes[i])
		}
		opTime += time.Since(t0)
		f, r := fp.footprint()
		res.series[t] = tracePoint{live, f}
		res.peakLive = max(res.peakLive, live)
		res.peakFootprint = max(res.peakFootprint, f)
		res.peakResident = max(res.peakResident, r)
		res.sumLive += float64(live)
		res.sumFootprint += float64(f)
	}
	res.wall = time.Since(start)
	_, gc1 := sampleCPU()
	res.gcFraction = fraction(gc1.gc-gc0.gc, gc1.busy-gc0.busy)
	res.nsPerOp = float64(opTime.Nanoseconds()) / float64(len(tr.sizes)+tr.freed())
	if ts, ok := a.(traceStatser); ok {
		res.stats = ts.traceStats()
	}
	return res, err
}

// hugeLoop allocates one block of size bytes, touches it and frees it.
func hugeLoop[H any](a allocator[H], size int64) hugeResult {
	t0 := time.Now()
	h, err := a.alloc(int(size))
	if err != nil {
		return hugeResult{err: err}
	}
	a.touch(h)
	d := time.Since(t0)
	return hugeResult{ok: true, ns: float64(d.Nanoseconds()), err: a.free(h)}
}
