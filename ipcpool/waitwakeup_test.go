package ipcpool

import (
	"context"
	"testing"
	"time"
)

// Owner.Wait wakes for a process that leaves between its count of the processes attached and
// its wait. (It counted under the owner's lock and took the lock again to wait: a leave in
// between broadcast to nobody, and Wait slept on until something else woke it, the watcher's
// next round or its context's end.) The owner's rounds are an hour apart here, so that only
// the leave can wake it in time. The hook runs where Wait has counted: with the owner's lock
// held there, the leave waits for Wait to be waiting; without it, the test lets the leave end
// first, as a scheduler may.
func TestOwnerWaitSeesALeaveAfterItsCount(t *testing.T) {
	w, path := serveTest(t, Options{DrainInterval: time.Hour})
	p := attachTest(t, path, AttachOptions{})
	left := make(chan error, 1)
	waitCounted = func() {
		waitCounted = nil // (Wait's goroutine: Wait reads it there)
		go func() { left <- p.Close() }()
		if w.mu.TryLock() {
			w.mu.Unlock()
			must(t, "Close", <-left)
			left <- nil
		}
	}
	defer func() { waitCounted = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	err := w.Wait(ctx)
	if err != nil || ctx.Err() != nil {
		t.Fatalf("Wait as the last process leaves after its count: %v after %v (its context: %v); "+
			"want nil at the leave", err, time.Since(start), ctx.Err())
	}
	must(t, "Close", <-left)
}
