package ipcpool

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// A grant request whose message times out (the owner reads nothing for the process's timeout:
// it is stopped, or busy, and the socket is full) fails with a timeout, and the connection
// stays: nothing of the message was written. Once the owner reads again, the process's next
// request is served. (The connection was closed: the owner, alive, refused the rejoin, and
// the healthy process was orphaned.)
func TestRequestTimedOutKeepsConnection(t *testing.T) {
	w, path := serveTest(t, Options{})
	// The grant below times out after the timeout: a second keeps the test short, and leaves
	// the handshake, the grants and the detach time enough on a loaded machine (50 ms failed
	// them there). Filling the socket needs no long wait: the owner reads nothing.
	p := attachTest(t, path, AttachOptions{Timeout: time.Second})
	cl := p.cl
	unlock := stallOwner(t, w, p)
	defer unlock()
	fillSocket(t, cl, 20*time.Millisecond)
	if _, err := cl.grant(1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a grant whose message times out: %v, want a timeout", err)
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

// stallOwner makes the owner's session of p stop reading (it waits for the owner's lock, at a
// release it has read), and shrinks p's socket buffer to the kernel's least. It returns what
// lets the owner read again (once; the test's cleanup need not).
func stallOwner(t *testing.T, w *Owner, p *Process) (unlock func()) {
	t.Helper()
	cl := p.cl
	g, err := cl.grant(1)
	must(t, "grant", err)
	cl.mu.Lock()
	c := cl.c
	cl.mu.Unlock()
	must(t, "SetWriteBuffer", c.SetWriteBuffer(1)) // (the kernel's least)

	w.mu.Lock() // the owner's session stops at the release: it reads nothing more
	unlock = sync1(w.mu.Unlock)
	cl.release(g, 1)
	oc := w.procs[p.slot].conn
	for end := time.Now().Add(10 * time.Second); unread(t, oc) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			unlock()
			t.Fatal("the owner does not read the release")
		}
	}
	return unlock
}

// fillSocket fills the process's socket to the owner with requests of nothing (grants of 0,
// answered stFull once the owner reads them), until a message times out, after d.
func fillSocket(t *testing.T, cl *client, d time.Duration) {
	t.Helper()
	cl.mu.Lock()
	c := cl.c
	cl.mu.Unlock()
	for i := 0; ; i++ {
		cl.wlock <- struct{}{}
		err := writeMsg(c, msg{op: opGrant, seq: 1<<62 + uint64(i)}, d)
		cl.unlockWrite()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return // the socket is full
		}
		if err != nil || i > 1<<16 {
			t.Fatalf("filling the socket: %v after %d messages", err, i)
		}
	}
}
