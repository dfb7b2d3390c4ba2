package ipcpool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A detach whose message the owner does not take (stopped, or busy: its socket full) is not
// sent again, nor does the process stay attached. Its write waits until the detach's deadline
// (sendBy: the earlier of the timeout and the deadline, which is the timeout), so no time is
// left to send it again; and the process has left by then (its pool closed, the pool
// unmapped), so nothing of it is usable to stay attached for, and kept attached it would hold
// its slot and the owner's Close (ErrAttached) until it exited. Close fails with a timeout and
// hangs up; the owner, once it reads, sees the process gone without a detach, and keeps what
// it held until it exits (TestSocketClosedMemoryKeptUntilExit): nothing is freed while the
// owner cannot know that the process maps it no more.
func TestDetachTimedOutHangsUp(t *testing.T) {
	const timeout = 100 * time.Millisecond
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: timeout})
	var detached atomic.Bool
	w.mu.Lock()
	w.pauseDetach = func() { detached.Store(true) }
	w.mu.Unlock()
	b, err := p.Alloc(4096) // a grant for the Close to give back: its release times out too
	must(t, "Alloc", err)
	must(t, "Free", p.Free(b))
	unlock := stallOwner(t, w, p)
	defer unlock()
	fillSocket(t, p.cl, 20*time.Millisecond)

	if err := p.Close(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close whose detach the owner does not read: %v, want a timeout", err)
	}
	unlock()
	waitFor(t, func() bool { return w.Attached() == 0 })
	if detached.Load() {
		t.Fatal("the owner took a detach of a Close that failed")
	}
	if err := w.Close(); err != nil {
		t.Fatalf("the owner's Close after the process hung up: %v", err)
	}
}
