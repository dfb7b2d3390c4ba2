package ipcpool

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A server that sends a forged hello (a geometry no pool has, descriptors that do not match)
// is refused with ErrProtocol: the attaching process neither panics nor maps anything sized
// by it, and frees what it received.
func TestForgedHelloRefused(t *testing.T) {
	good := hello{pool: 7, slot: 1, serial: 1, layout: layout{regions: 1, regionSize: 2 << 20, grantSize: 2 << 20,
		slots: 2, ringCap: 4, exports: 4}}
	good.ctlSize = good.ctlBytes()
	forge := func(f func(h *hello)) hello { h := good; f(&h); return h }
	cases := []struct {
		name string
		h    hello
		fds  func(t *testing.T) []int
	}{
		{"ring of 2^62", forge(func(h *hello) { h.ringCap = 1 << 62 }), nil},
		{"grants of 16 bytes", forge(func(h *hello) { h.grantSize, h.regionSize = 16, 16 }), nil},
		{"slot past the slots", forge(func(h *hello) { h.slot = 2 }), nil},
		{"1000 regions", forge(func(h *hello) { h.regions = 1000 }), nil},
		{"a control region too small", forge(func(h *hello) { h.ctlSize = 4096 }), nil},
		{"serial 0", forge(func(h *hello) { h.serial = 0 }), nil},
		{"exports of 2^40", forge(func(h *hello) { h.exports = 1 << 40 }), nil},
		{"one descriptor short", good, func(t *testing.T) []int { return memfds(t, good.ctlSize) }},
		{"a region of the wrong size", good, func(t *testing.T) []int { return memfds(t, good.ctlSize, 4<<20) }},
		{"an unsealed region", good, func(t *testing.T) []int {
			fds := memfds(t, good.ctlSize)
			fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
			must(t, "memfd", err)
			must(t, "ftruncate", unix.Ftruncate(fd, 2<<20))
			return append(fds, fd)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fds := memfds(t, good.ctlSize, 2<<20)
			if c.fds != nil {
				fds = c.fds(t)
			}
			path := fakeServer(t, func(conn *net.UnixConn) {
				if _, err := readMsg(conn); err != nil {
					return
				}
				_ = sendFds(conn, c.h.encode(), fds, time.Second)
				_, _ = readMsg(conn) // the abort, if any
			})
			before := openFds(t)
			_, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true, Timeout: time.Second})
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Attach to a server sending %s: %v, want ErrProtocol", c.name, err)
			}
			for end := time.Now().Add(2 * time.Second); openFds(t) > before; time.Sleep(time.Millisecond) {
				if time.Now().After(end) { // the fake server's end closes as the connection ends
					t.Fatalf("%d descriptors open after the refusal, %d before", openFds(t), before)
				}
			}
		})
	}
}

// memfds makes sealed memfds of the sizes given, closed at cleanup (the copies sent are the
// receiver's).
func memfds(t *testing.T, sizes ...uintptr) []int {
	var fds []int
	for _, n := range sizes {
		fd, err := newMemfd("test", n)
		must(t, "memfd", err)
		t.Cleanup(func() { unix.Close(fd) })
		fds = append(fds, fd)
	}
	return fds
}

// fakeServer serves each connection to a temporary socket with serve, as this user.
func fakeServer(t *testing.T, serve func(*net.UnixConn)) string {
	path := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	must(t, "listen", err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go func() { defer c.Close(); serve(c) }()
		}
	}()
	return path
}

// openFds counts this process's open descriptors.
func openFds(t *testing.T) int {
	es, err := os.ReadDir("/proc/self/fd")
	must(t, "fds", err)
	return len(es)
}

// Connections that fail the handshake, send garbage, stay silent or break the protocol after
// it get closed, and their slots are free at once: a pool of one slot is attached to after
// each of them.
func TestBadPeersFreeTheirSlots(t *testing.T) {
	w, path := serveTest(t, Options{Slots: 2, Timeout: 300 * time.Millisecond})
	dial := func() *net.UnixConn {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		must(t, "dial", err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	// intro reads the hello as a client would, and closes its descriptors.
	intro := func(c *net.UnixConn) {
		must(t, "intro", writeMsg(c, msg{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}, time.Second))
		b := make([]byte, 8*helloWords)
		_, fds, err := recvFds(c, b, 1+maxRegions)
		must(t, "hello", err)
		closeFds(fds)
	}
	ready := func(c *net.UnixConn) {
		must(t, "ready", writeMsg(c, msg{op: opReady}, time.Second))
		if m, err := readMsg(c); err != nil || m.op != opReply || m.a != stOK {
			t.Fatalf("the answer to ready: %+v %v", m, err)
		}
	}
	closedByOwner := func(c *net.UnixConn) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [64]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("the owner did not close the connection")
				}
				return
			}
		}
	}
	attachOnce := func(what string) {
		t.Helper()
		waitFor(t, func() bool { return w.Attached() == 0 })
		p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
		if err != nil {
			t.Fatalf("after %s: %v", what, err)
		}
		must(t, "Close", p.Close())
	}
	for _, c := range []struct {
		name string
		run  func(*net.UnixConn)
	}{
		{"garbage instead of the intro", func(c *net.UnixConn) { _, _ = c.Write([]byte("GET / HTTP/1.1\r\n\r\n.............")) }},
		{"a truncated intro", func(c *net.UnixConn) { _, _ = c.Write([]byte{1, 0, 0, 0, 9}) }},
		{"silence", func(c *net.UnixConn) {}},
		{"an intro of another version", func(c *net.UnixConn) {
			_ = writeMsg(c, msg{op: opIntro, flags: introAttach, seq: wireVersion + 1, a: ctlMagic}, time.Second)
		}},
		{"silence after the hello", intro},
		{"garbage after the hello", func(c *net.UnixConn) { intro(c); _, _ = c.Write(make([]byte, msgSize)) }},
		{"an abort", func(c *net.UnixConn) { intro(c); _ = writeMsg(c, msg{op: opAbort}, time.Second) }},
		{"a release of grants it does not hold", func(c *net.UnixConn) {
			intro(c)
			ready(c)
			_ = writeMsg(c, msg{op: opRelease, a: 0, b: 1}, time.Second)
		}},
		{"an unknown request", func(c *net.UnixConn) {
			intro(c)
			ready(c)
			_ = writeMsg(c, msg{op: 99, seq: 1}, time.Second)
		}},
		{"a grant of 2^40 grants", func(c *net.UnixConn) {
			intro(c)
			ready(c)
			_ = writeMsg(c, msg{op: opGrant, seq: 1, a: 1 << 40, b: uint64(time.Second)}, time.Second)
			m, err := readMsg(c)
			if err != nil || m.op != opReply || m.a != stFull {
				t.Errorf("a grant of 2^40 grants: %+v %v, want a refusal", m, err)
			}
			_ = writeMsg(c, msg{op: 0}, time.Second) // and garbage
		}},
	} {
		conn := dial()
		c.run(conn)
		closedByOwner(conn)
		attachOnce(c.name)
		if held := w.SharedStats().Pool.Held; held != w.src.grantsHeld() {
			t.Fatalf("after %s: %d grants held, the owner holds %d", c.name, held, w.src.grantsHeld())
		}
	}
}

// A refused user gets ErrRefused from Attach, and nothing of the pool.
func TestPeerRefused(t *testing.T) {
	w, path := serveTest(t, Options{})
	w.mu.Lock()
	w.allow = map[int]bool{} // not even the owner's user: this process's peer is refused
	w.mu.Unlock()
	if _, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("Attach by a refused user: %v", err)
	}
	if n := w.Attached(); n != 0 {
		t.Fatalf("%d attached after a refusal", n)
	}
}

// A process whose pid the owner cannot see (the kernel gives it as 0 to an owner in another pid
// namespace) is refused: the owner could not watch it, and would take it to have exited once
// it left its socket, lending its memory again while it may still use it.
func TestPeerOfAnotherPidNamespaceRefused(t *testing.T) {
	clientCred = func(c *net.UnixConn) (*unix.Ucred, error) {
		cred, err := peerCred(c)
		if err == nil {
			cred.Pid = 0
		}
		return cred, err
	}
	t.Cleanup(func() { clientCred = peerCred }) // after the owner's Close: its sessions are done
	w, path := serveTest(t, Options{})
	if _, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("Attach by a process of pid 0: %v", err)
	}
	if n := w.Attached(); n != 0 {
		t.Fatalf("%d attached after a refusal", n)
	}
}
