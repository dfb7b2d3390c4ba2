package remote

import (
	"context"
	"testing"
)

// stalledPair is two workers over shared memory (UCX_TLS sm, SharedMemory: the close of a
// failed connection's endpoint is not forced there), the first connected to the second, whose
// worker the test stalls (stall) and lets go on (resume).
type stalledPair struct {
	ws   [2]*Worker
	c    *Conn // the first worker's connection to the second
	gate chan struct{}
}

// newStalledPair makes a stalledPair of workers made with o, each passed to setup (nil: none)
// before the dial. The cleanup lets the second go on, if stalled, and closes both (a worker the
// test closed already says ErrClosed, unchecked), each before what its setup made.
func newStalledPair(t *testing.T, ctx context.Context, o Options, setup func(i int, w *Worker)) *stalledPair {
	t.Helper()
	needUCX(t)
	t.Setenv("UCX_TLS", "sm")
	o.SharedMemory = true
	sp := &stalledPair{}
	for i := range sp.ws {
		w, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		sp.ws[i] = w
		if setup != nil {
			setup(i, w) // its cleanups run after the worker's Close
		}
		t.Cleanup(func() { _ = w.Close() }) // after resume: the second's Close needs progress
	}
	t.Cleanup(sp.resume)
	addr, err := sp.ws[1].Address()
	if err != nil {
		t.Fatal(err)
	}
	if sp.c, err = sp.ws[0].Dial(ctx, addr); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.ws[1].Accept(ctx); err != nil {
		t.Fatal(err)
	}
	return sp
}

// stall makes the second worker make no progress until resume.
func (sp *stalledPair) stall() {
	sp.gate = make(chan struct{})
	sp.ws[1].mu.Lock()
	sp.ws[1].paused = sp.gate
	sp.ws[1].mu.Unlock()
	sp.ws[1].signal()
}

// resume lets the second worker progress again, if stalled.
func (sp *stalledPair) resume() {
	if sp.gate == nil {
		return
	}
	sp.ws[1].mu.Lock()
	sp.ws[1].paused = nil
	sp.ws[1].mu.Unlock()
	close(sp.gate)
	sp.gate = nil
}
