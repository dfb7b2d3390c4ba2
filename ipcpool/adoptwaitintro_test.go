package ipcpool

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// A process that connects while the owner waits for a pool to adopt has the whole of
// Options.Timeout from the owner's serving for its handshake, its intro included: an intro the
// owner reads past the Timeout of the connection, but within the Timeout of the serving, is
// answered. (The owner read the intro with the connection's own deadline, its accept plus the
// Timeout, and cut off a process whose intro came, or whose session read it, after that, as
// on a loaded machine: made here every time by an intro sent late.)
func TestAdoptWaitLeavesAnIntroPastItsConnectionsTimeout(t *testing.T) {
	const timeout = time.Second
	path := filepath.Join(t.TempDir(), "pool.sock")
	served := make(chan *Owner, 1)
	go func() {
		// Nothing to adopt: the owner makes a new pool after the timeout.
		w, err := Serve(path, Options{Size: 4 << 20, Adopt: timeout, Timeout: timeout, FallbackPageable: true})
		if err != nil {
			t.Error(err)
		}
		served <- w
	}()
	var c *net.UnixConn
	waitFor(t, func() bool {
		var err error
		c, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		return err == nil
	})
	defer c.Close()
	connected := time.Now()
	w := <-served
	if w == nil {
		t.FailNow()
	}
	defer func() { must(t, "owner Close", w.Close()) }()
	w.mu.Lock()
	at := w.servedAt
	w.mu.Unlock()
	// Past the timeout since the connection, half of it since the owner served: time that must
	// pass, not a wait for an event.
	time.Sleep(time.Until(at.Add(timeout / 2)))
	if time.Since(connected) <= timeout {
		t.Skipf("the owner served %v after the connection: the intro is within the connection's timeout", at.Sub(connected))
	}
	must(t, "intro", writeMsg(c, msg{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}, time.Second))
	b := make([]byte, 8*helloWords)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, fds, err := recvFds(c, b, 1+maxRegions)
	closeFds(fds)
	if err != nil || n != len(b) {
		t.Fatalf("the answer to an intro within the timeout of the owner's serving (%v after it, "+
			"%v after the connection): %d bytes, %v; want a hello", time.Since(at), time.Since(connected), n, err)
	}
	must(t, "ready", writeMsg(c, msg{op: opReady}, time.Second))
	if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stOK {
		t.Fatalf("the answer to the ready: %+v %v", m, err)
	}
	must(t, "detach", writeMsg(c, msg{op: opDetach, seq: 1}, time.Second))
	if m, err := readMsg(c); err != nil || m.a != stOK {
		t.Fatalf("the answer to the detach: %+v %v", m, err)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
}
