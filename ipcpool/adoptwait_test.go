package ipcpool

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// An attaching process that connects while the owner waits for a pool to adopt (Options.Adopt)
// has the whole of Options.Timeout for its handshake once the owner serves, as the option says:
// the wait does not eat it. (The owner's deadline ran from the connection: a ready sent within
// the timeout of the hello, but past the timeout of the connection, was given up.)
func TestAdoptWaitLeavesTheHandshakeItsTimeout(t *testing.T) {
	testAdoptWaitTimeout(t, false)
}

// The same holds when the owner reads the process's intro only after it began to serve: the
// connection still came during the wait. (The owner restarted the deadline only when its
// session saw the wait, so a session late to read the intro, on a loaded machine, gave the
// process up: CI's failure of stop 66, made here every time by an intro sent late.)
func TestAdoptWaitLeavesALateIntroItsTimeout(t *testing.T) {
	testAdoptWaitTimeout(t, true)
}

func testAdoptWaitTimeout(t *testing.T, lateIntro bool) {
	const timeout = time.Second
	path := filepath.Join(t.TempDir(), "pool.sock")
	served := make(chan *Owner, 1)
	go func() {
		// Nothing to adopt: the owner makes a new pool after timeout/2.
		w, err := Serve(path, Options{Size: 4 << 20, Adopt: timeout / 2, Timeout: timeout, FallbackPageable: true})
		if err != nil {
			t.Error(err)
		}
		served <- w
	}()
	var c *net.UnixConn
	start := time.Now()
	waitFor(t, func() bool {
		var err error
		c, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		return err == nil
	})
	defer c.Close()
	var w *Owner
	if lateIntro {
		w = <-served
	}
	must(t, "intro", writeMsg(c, msg{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}, time.Second))
	b := make([]byte, 8*helloWords)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, fds, err := recvFds(c, b, 1+maxRegions) // once the owner serves
	must(t, "hello", err)
	closeFds(fds)
	if !lateIntro {
		w = <-served
	}
	if w == nil {
		t.FailNow()
	}
	defer func() { must(t, "owner Close", w.Close()) }()
	// Past the timeout since the connection, within it since the owner served (timeout/2 in):
	// time that must pass, not a wait for an event.
	time.Sleep(time.Until(start.Add(timeout + timeout/4)))
	must(t, "ready", writeMsg(c, msg{op: opReady}, time.Second))
	if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stOK {
		t.Fatalf("the answer to a ready within the timeout of the owner's serving: %+v %v", m, err)
	}
	must(t, "detach", writeMsg(c, msg{op: opDetach, seq: 1}, time.Second))
	if m, err := readMsg(c); err != nil || m.a != stOK {
		t.Fatalf("the answer to the detach: %+v %v", m, err)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
}
