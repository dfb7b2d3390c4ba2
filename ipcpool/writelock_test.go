package ipcpool

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A request waits for the connection's write lock no longer than its deadline. A release
// whose message the owner does not take (stopped, its socket full) holds the lock for up to
// the process's timeout, at each try as it is sent again (resend): a request of a shorter
// deadline fails by its deadline with a timeout, and the connection stays. (It waited for the
// lock until the release's write timed out: a whole timeout past its deadline.)
func TestRequestWaitsForWriteLockWithinDeadline(t *testing.T) {
	const timeout = 10 * time.Second
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: timeout})
	cl := p.cl
	g, err := cl.grant(1)
	must(t, "grant", err)
	unlock := stallOwner(t, w, p)
	defer unlock()
	fillSocket(t, cl, 20*time.Millisecond)

	released := make(chan struct{})
	go func() { // its message waits for the owner up to the timeout, holding the lock
		defer close(released)
		cl.release(g, 1)
	}()
	for end := time.Now().Add(10 * time.Second); !writeHeld(cl); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the release does not write")
		}
	}

	const d = 100 * time.Millisecond
	start := time.Now()
	_, err = cl.request(opGrant, 1, uint64(timeout), d)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > timeout/2 {
		t.Fatalf("a request of deadline %v while a release waits for the owner: %v after %v, "+
			"want a timeout by its deadline", d, err, took)
	}
	unlock()
	<-released

	for end := time.Now().Add(10 * time.Second); ; {
		_, err := cl.grant(1)
		if err == nil {
			break
		}
		if errors.Is(err, ErrClosed) || time.Now().After(end) {
			t.Fatalf("a grant once the owner reads again: %v", err)
		}
	}
	if n := p.Rejoined(); n != 0 {
		t.Fatalf("the process rejoined %d times; its connection was closed", n)
	}
}

// writeHeld reports whether a write holds cl's write lock.
func writeHeld(cl *client) bool { return len(cl.wlock) == 1 }
