package pinned

import (
	"bytes"
	"runtime"
	"strconv"
)

// Allocation traces (Options.Trace): with the option on, Alloc and Free take their guarded paths
// and write one record each (size, alignment, time, goroutine; see package internal/alloctrace for
// the format), which `cd bench && go run . -replay FILE` plays against other allocators. Frees are
// serialised by the trace's lock while the heap takes the buffer back, so that an Alloc handed the
// same memory is recorded after the free. Off, nothing changes on the fast paths.

// FlushTrace writes out the trace records buffered so far and returns the first error of any
// write of the trace (nil without Options.Trace). Close flushes too.
func (p *Pool) FlushTrace() error {
	if p.trace == nil {
		return nil
	}
	if err := p.trace.Flush(); err != nil {
		return wrapError(err, ErrTrace)
	}
	return nil
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
