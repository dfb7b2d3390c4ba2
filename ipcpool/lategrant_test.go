package ipcpool

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLateGrantGivenBackAsOwnerLeaves: the answer to a grant request that gave up comes just
// before the answer to the process's detach, and the owner has closed the connection by the
// time the reader gives that grant back. The give-back's broken pipe must not cost the
// detach its answer. Before, the give-back closed the connection with the detach's answer
// unread, and the detach failed: the client took the owner for gone and waited for a rejoin
// no owner would take (TestStoppedOwner failed so about once in 100 runs under load).
func TestLateGrantGivenBackAsOwnerLeaves(t *testing.T) {
	const lateSeq = 1 << 20
	cl, owner, m, detached := detaching(t, 500*time.Millisecond, map[uint64]uint64{lateSeq: 1})
	must(t, "the late grant's answer", writeMsg(owner, msg{op: opReply, seq: lateSeq, a: stOK, b: 2}, time.Second))
	must(t, "the detach's answer", writeMsg(owner, msg{op: opReply, seq: m.seq, a: stOK}, time.Second))
	must(t, "the owner's close", owner.Close())
	cl.start() // its reader reads both only now: the give-back meets a closed peer

	wantDetached(t, detached)
	cl.close()
}

// detaching returns a client of a scripted owner (its end of a socket pair), with the grant
// requests late that gave up, whose detach is under way: the owner has read it (m).
func detaching(t *testing.T, timeout time.Duration, late map[uint64]uint64) (cl *client, owner *net.UnixConn, m msg, detached chan error) {
	t.Helper()
	ours, owner := unixPair(t)
	h := hello{pool: 1, slot: 1, serial: 1,
		layout: layout{regions: 1, regionSize: 8 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}}
	cl = newClient(ours, filepath.Join(t.TempDir(), "no-owner.sock"), timeout, nil, h)
	cl.late = late
	detached = make(chan error, 1)
	go func() { detached <- cl.detach(false) }()
	m, err := readMsg(owner)
	if err != nil || m.op != opDetach {
		t.Fatalf("the owner read %+v, %v; want the detach", m, err)
	}
	return cl, owner, m, detached
}

// wantDetached fails the test unless the detach ends without an error within 5 s.
func wantDetached(t *testing.T, detached chan error) {
	t.Helper()
	select {
	case err := <-detached:
		if err != nil {
			t.Fatalf("a detach the owner answered before it closed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("detach still waiting after 5 s")
	}
}

// unixPair returns the two ends of a connected Unix stream socket pair, closed at the test's end.
func unixPair(t *testing.T) (a, b *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	must(t, "socketpair", err)
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "unix")
		defer f.Close()
		c, err := net.FileConn(f)
		must(t, "FileConn", err)
		t.Cleanup(func() { _ = c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// TestRequestAfterOwnerClosedKeepsAnswers: a request whose write meets an owner that has closed
// its end, the answer to the process's detach still unread, must not cost the detach that
// answer (a Close racing an Alloc). Before, the request's broken pipe closed the connection.
func TestRequestAfterOwnerClosedKeepsAnswers(t *testing.T) {
	cl, owner, m, detached := detaching(t, time.Second, nil)
	must(t, "the detach's answer", writeMsg(owner, msg{op: opReply, seq: m.seq, a: stOK}, time.Second))
	must(t, "the owner's close", owner.Close())
	granted := make(chan error, 1)
	go func() {
		_, err := cl.grant(1)
		granted <- err
	}()
	waitFor(t, func() bool { // the grant's request is numbered: its write follows at once
		cl.mu.Lock()
		defer cl.mu.Unlock()
		return cl.seq > m.seq
	})
	time.Sleep(50 * time.Millisecond) // (it meets the broken pipe at once)
	cl.start()                        // its reader reads the detach's answer only now

	wantDetached(t, detached)
	if err := <-granted; err == nil {
		t.Fatal("a grant from an owner that has closed the connection")
	}
	cl.close()
}
