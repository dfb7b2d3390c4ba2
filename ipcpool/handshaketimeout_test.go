package ipcpool

import (
	"net"
	"testing"
	"time"
)

// Options.Timeout bounds the handshake as a whole, from the connection (one deadline, not one
// per step, as its doc says): a peer that sends its intro late and then stays silent is closed
// within the timeout of its connection, not of its intro.
func TestHandshakeTimeoutBoundsTheWhole(t *testing.T) {
	const timeout = time.Second
	w, path := serveTest(t, Options{Timeout: timeout})
	start := time.Now()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	must(t, "dial", err)
	defer c.Close()
	time.Sleep(timeout * 7 / 10) // a slow step: time that must pass, not a wait for an event
	must(t, "intro", writeMsg(c, msg{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}, time.Second))
	b := make([]byte, 8*helloWords)
	_, fds, err := recvFds(c, b, 1+maxRegions)
	must(t, "hello", err)
	closeFds(fds)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stRefused || m.b != refusedLate {
		t.Fatalf("the owner's word to a peer silent after its hello: %+v %v, want it given up as late", m, err)
	}
	if _, err := c.Read(b); err == nil {
		t.Fatal("the owner sent more to a peer it gave up")
	}
	// Closed at the timeout of the connection (1.0 s in); one per step would be at 1.7 s.
	if d := time.Since(start); d > timeout*135/100 {
		t.Fatalf("a peer silent after the hello was closed %v after its connection, want the timeout (%v)", d, timeout)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
}
