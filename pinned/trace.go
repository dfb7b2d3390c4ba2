package pinned

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
)

// Allocation traces (Options.Trace): with the option on, Alloc and Free take their guarded paths
// and write one record each (size, alignment, time, goroutine; see package internal/alloctrace for
// the format), which `cd bench && go run . -replay FILE` plays against other allocators. Frees are
// serialised by the trace's lock while the heap takes the buffer back, so that an Alloc handed the
// same memory is recorded after the free. Off, nothing changes on the fast paths.

// FlushTrace writes out the trace records buffered so far and returns the first error of any
// write of the trace (nil without Options.Trace), or says how many allocations the trace could
// not record, and why the first could not: the trace is short of them from then on. Close
// flushes too.
func (p *Pool) FlushTrace() error {
	if p.trace == nil {
		return nil
	}
	if err := p.trace.Flush(); err != nil {
		return wrapError(err, ErrTrace)
	}
	if n := p.traceLost.Load(); n > 0 {
		return fmt.Errorf("%w: %d allocations not recorded, the first: %w", ErrTrace, n, *p.traceWhy.Load())
	}
	return nil
}

// traceAlloc records the allocation of n bytes aligned to alignment (0: the pool's own) at
// addr. The trace refuses only an allocation a well-formed trace cannot hold (a size or an
// alignment beyond 2^47, or live bytes summing beyond it), which a pool's capacity, at most
// 2^47, rules out while every free is recorded; should one come, it is counted, and
// FlushTrace says so, rather than the trace passing for whole.
func (p *Pool) traceAlloc(addr, n, alignment uintptr) {
	var g uint64
	if p.traceG {
		g = goroutineID()
	}
	if err := p.trace.Alloc(addr, uint64(n), uint64(alignment), g); err != nil {
		p.traceWhy.CompareAndSwap(nil, &err) // before the count: FlushTrace reads it after
		p.traceLost.Add(1)
	}
}

// goroutineID returns the calling goroutine's number, from the first line of its stack
// ("goroutine 123 [running]:"). It costs a short stack print: only traces pay it.
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		if id, err := strconv.ParseUint(string(b[:i]), 10, 64); err == nil {
			return id
		}
	}
	return 0
}
