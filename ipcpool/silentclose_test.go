package ipcpool

import (
	"net"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A connection that says nothing (no intro: it holds no slot, nothing was lent on it) does not
// hold up the owner's Close: Close cuts it and returns at once. (Close waited for its session,
// which read the intro until the handshake's deadline: the owner's Timeout.)
func TestOwnerCloseCutsSilentConnection(t *testing.T) {
	started := make(chan struct{}, 1)
	clientCred = func(c *net.UnixConn) (*unix.Ucred, error) {
		started <- struct{}{} // the session reads the intro next
		return peerCred(c)
	}
	t.Cleanup(func() { clientCred = peerCred }) // after the owner's Close: its sessions are done
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 6 << 20, FallbackPageable: true, Timeout: 3 * time.Second})
	must(t, "Serve", err)
	c, err := net.Dial("unix", path)
	must(t, "Dial", err)
	defer c.Close()
	<-started
	start := time.Now()
	must(t, "Close", w.Close())
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the owner's Close waited %v for a connection that says nothing", d)
	}
}

// A process that left and does not read its answer (its socket full) does not hold up the
// owner's Close: the answer is written at once where there is room, and where there is none
// Close cuts the wait short, the process gone from its slot. (Close waited for the answer's
// write, the owner's Timeout.)
func TestOwnerCloseCutsUnreadDetachAnswer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 6 << 20, FallbackPageable: true, Timeout: 3 * time.Second})
	must(t, "Serve", err)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	must(t, "Dial", err)
	defer c.Close()
	intro := msg{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}
	must(t, "intro", writeMsg(c, intro, time.Second))
	_, fds, err := recvFds(c, make([]byte, 8*helloWords), 1+maxRegions)
	must(t, "hello", err)
	closeFds(fds)
	must(t, "ready", writeMsg(c, msg{op: opReady}, time.Second))
	if m, err := readMsg(c); err != nil || m.a != stOK {
		t.Fatalf("the answer to ready: %+v %v", m, err)
	}
	var oc *net.UnixConn
	w.mu.Lock()
	for s := 1; s < len(w.procs); s++ {
		if w.procs[s].used {
			oc = w.procs[s].conn
		}
	}
	w.mu.Unlock()
	must(t, "SetWriteBuffer", oc.SetWriteBuffer(1)) // (the kernel's least)
	// Grant requests of nothing, each answered stFull, until the owner's socket is full: the
	// next write would wait for this process to read.
	for i := 1; !full(t, oc); i++ {
		must(t, "request", writeMsg(c, msg{op: opGrant, seq: uint64(i)}, time.Second))
		end := time.Now().Add(10 * time.Second)
		for ; unread(t, c) < i*msgSize; time.Sleep(time.Millisecond) {
			if time.Now().After(end) || i > 1<<10 {
				t.Fatalf("%d answers of %d", unread(t, c)/msgSize, i)
			}
		}
	}
	must(t, "detach", writeMsg(c, msg{op: opDetach, seq: 1 << 20}, time.Second))
	waitFor(t, func() bool { return w.Attached() == 0 })
	start := time.Now()
	must(t, "Close", w.Close())
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the owner's Close waited %v for a process that left and does not read", d)
	}
}

// full reports whether c's socket holds as much as its send buffer allows: a write waits.
func full(t *testing.T, c *net.UnixConn) bool {
	t.Helper()
	rc, err := c.SyscallConn()
	must(t, "SyscallConn", err)
	var out, limit int
	var oerr, merr error
	must(t, "Control", rc.Control(func(fd uintptr) {
		out, oerr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		limit, merr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	}))
	must(t, "SIOCOUTQ", oerr)
	must(t, "SO_SNDBUF", merr)
	return out >= limit
}
