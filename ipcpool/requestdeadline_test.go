package ipcpool

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A request whose deadline comes before the process's timeout waits for the owner to read its
// message no longer than its deadline: it fails then with a timeout, and the connection stays.
// (The write waited the whole timeout: a grant that had waited for a rejoin overran its
// deadline by up to a timeout.)
func TestRequestWriteWithinDeadline(t *testing.T) {
	const timeout = 10 * time.Second
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: timeout})
	cl := p.cl
	unlock := stallOwner(t, w, p)
	defer unlock()
	fillSocket(t, cl, 20*time.Millisecond)

	const d = 100 * time.Millisecond
	start := time.Now()
	_, err := cl.request(opGrant, 1, uint64(timeout), d)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || took > timeout/2 {
		t.Fatalf("a request of deadline %v to an owner that reads nothing: %v after %v, "+
			"want a timeout by its deadline", d, err, took)
	}
	unlock()

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
