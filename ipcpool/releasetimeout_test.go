package ipcpool

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A release whose message times out (the owner reads nothing for the process's timeout: it is
// stopped, or busy) is sent again once the owner reads again, on the same connection: the
// owner takes the grant back, and counts nothing the process does not hold. (The release was
// dropped: the owner counted the grant as the process's until the process left.)
func TestReleaseTimedOutSentAgain(t *testing.T) {
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: 50 * time.Millisecond})
	cl := p.cl
	g1, err := cl.grant(1)
	must(t, "grant", err)
	g2, err := cl.grant(1)
	must(t, "grant", err)
	cl.mu.Lock()
	c := cl.c
	cl.mu.Unlock()
	must(t, "SetWriteBuffer", c.SetWriteBuffer(1)) // (the kernel's least)

	w.mu.Lock() // the owner's session stops at the first release: it reads nothing more
	unlock := sync1(w.mu.Unlock)
	defer unlock()
	cl.release(g1, 1)
	oc := w.procs[p.slot].conn
	for end := time.Now().Add(10 * time.Second); unread(t, oc) > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the owner does not read the release")
		}
	}
	for i := 0; ; i++ { // grant requests of nothing, answered stFull once the owner reads again
		err := cl.sendOn(c, msg{op: opGrant, seq: 1<<62 + uint64(i)})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break // the socket is full
		}
		if err != nil || i > 1<<16 {
			t.Fatalf("filling the socket: %v after %d messages", err, i)
		}
	}
	cl.release(g2, 1) // its message times out
	unlock()

	for end := time.Now().Add(2 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		held := w.heldBy(p.slot)
		w.mu.Unlock()
		if held == p.src.grantsHeld() {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the owner lends the process %d grants, the process holds %d", held, p.src.grantsHeld())
		}
	}
}

// unread returns how many bytes wait unread on c.
func unread(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	must(t, "SyscallConn", err)
	var n int
	var ierr error
	must(t, "Control", rc.Control(func(fd uintptr) {
		n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
	}))
	must(t, "SIOCINQ", ierr)
	return n
}

// sync1 returns f, to be called once: later calls do nothing.
func sync1(f func()) func() {
	done := false
	return func() {
		if !done {
			done = true
			f()
		}
	}
}
