package ipcpool

import (
	"context"
	"net"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A process of the previous owner that begins its rejoin before the rejoins' deadline (set by
// another process's adoption: Options.Timeout after it) has its own handshake's Timeout to end
// it: the rejoins' deadline passing meanwhile does not give its slot up under it. (The owner's
// round gave the slot up at the rejoins' deadline whatever handshake was under way, and the
// rejoin, within the Timeout of its connection, was refused as a process the owner does not
// know: orphaned for good.) A rejoin begun in time that stays silent holds its slot back no
// longer than its own deadline.
func TestRejoinKeepsItsHandshakeDeadline(t *testing.T) {
	testRejoinDeadline(t, false)
}

// The same holds when the owner's session of the rejoin runs only after the rejoins' deadline,
// on a loaded machine: the connection came before it. (The session took its own start, after
// it had the peer's credentials, for the connection's: such a rejoin held no slot, and was
// refused once the round gave the slot up. Made here every time by credentials that come late.)
func TestRejoinKeepsItsHandshakeDeadlineLateSession(t *testing.T) {
	testRejoinDeadline(t, true)
}

func testRejoinDeadline(t *testing.T, lateSession bool) {
	const timeout = time.Second
	// Once set (lateSession), a session has the peer's credentials only at that time.
	var credsAt atomic.Int64
	clientCred = func(c *net.UnixConn) (*unix.Ucred, error) {
		if at := credsAt.Load(); at != 0 {
			time.Sleep(time.Until(time.Unix(0, at)))
		}
		return peerCred(c)
	}
	t.Cleanup(func() { clientCred = peerCred }) // after the owner's Close: its sessions are done
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 8<<20)
	k, err := Keep(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Keep", err)
	defer k.Close()
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	defer p.Close()
	b, err := p.Alloc(5000)
	must(t, "Alloc", err)
	defer p.Free(b)
	q, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	defer q.Close()
	// The test speaks for p's and q's slots: their own rejoins stop.
	for _, x := range []*Process{p, q} {
		x.cl.mu.Lock()
		x.cl.closing = true
		x.cl.mu.Unlock()
	}
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	p.cl.readers.Wait()
	q.cl.readers.Wait()
	// The keeper rejoins, hands the pool over: its session's adoption sets the rejoins' deadline.
	w, err := Serve(path, Options{Size: 8 << 20, Adopt: 5 * time.Second, Timeout: timeout,
		FallbackPageable: true})
	must(t, "Serve adopting", err)
	defer w.Close()
	waitFor(t, func() bool { return k.Rejoined() == 1 })
	w.mu.Lock()
	by := w.rejoinBy
	w.mu.Unlock()
	// Half the timeout before the rejoins' deadline (time that must pass): p's rejoin begins.
	time.Sleep(time.Until(by.Add(-timeout / 2)))
	start := time.Now()
	if lateSession {
		credsAt.Store(by.Add(timeout / 10).UnixNano())
	}
	// A connection that came in time and never says what it is holds the slots back no longer
	// than its own deadline either (checked with q's below).
	silent, err := net.Dial("unix", path)
	must(t, "dial", err)
	defer silent.Close()
	begin := func(x *Process) *net.UnixConn {
		nc, err := net.Dial("unix", path)
		must(t, "dial", err)
		c := nc.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		intro := msg{op: opIntro, flags: introRejoin, seq: wireVersion, a: ctlMagic, b: x.id}
		must(t, "intro", writeMsg(c, intro, 0))
		must(t, "rejoin", writeMsg(c, msg{op: opRejoin, a: uint64(x.slot), b: x.serial}, 0))
		if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stClaims {
			t.Fatalf("the owner's answer to the rejoin: %+v, %v", m, err)
		}
		return c
	}
	c := begin(p)
	begin(q) // silent from now on
	// The rejoins' deadline passes, and the owner's rounds after it run, while the claims are
	// still to come: within the handshake's Timeout.
	time.Sleep(time.Until(by))
	r := w.rounds.Load()
	waitFor(t, func() bool { return w.rounds.Load() >= r+2 })
	if time.Since(start) > timeout*8/10 {
		t.Skipf("the rounds after the rejoins' deadline took until %v into the handshake",
			time.Since(start))
	}
	_, err = c.Write(p.cl.claims())
	must(t, "claims", err)
	if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stOK {
		t.Fatalf("a rejoin within its handshake's Timeout, begun before the rejoins' deadline, "+
			"answered %+v, %v: want it taken back", m, err)
	}
	if !w.slotUsed(p.slot) {
		t.Fatalf("slot %d is free after its process rejoined", p.slot)
	}
	// q's silent rejoin is cut off at its deadline, and its slot given up then.
	waitFor(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.procs[q.slot].rejoin && w.rejoinBy.IsZero()
	})
	if d := time.Since(start); d > 2*timeout {
		t.Errorf("a silent rejoin held its slot back %v, past its handshake's deadline (%v)", d, timeout)
	}
}
