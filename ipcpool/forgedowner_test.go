package ipcpool

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// fakeOwner serves, at a temporary socket, a pool of geometry l made of real memfds, with a
// control region as a true owner writes it, and answers each grant request with answer (a
// broken or hostile owner). It returns the path.
func fakeOwner(t *testing.T, l layout, answer func(m msg) msg) string {
	t.Helper()
	return fakeOwnerWith(t, l, 1, func(fds []int) []int { return fds }, answer)
}

// fakeOwnerWith is fakeOwner with the hello's slot given and its descriptors chosen by pick
// from the control region's and the regions' own (a hostile owner may send one twice).
func fakeOwnerWith(t *testing.T, l layout, slot int, pick func(fds []int) []int, answer func(m msg) msg) string {
	t.Helper()
	h := hello{pool: 99, slot: slot, serial: 1, layout: l, ctlSize: l.ctlBytes(), epoch: 1}
	sizes := []uintptr{h.ctlSize}
	for range l.regions {
		sizes = append(sizes, l.regionSize)
	}
	fds := memfds(t, sizes...)
	base, err := mapCtl(fds[0], h.ctlSize)
	must(t, "map", err)
	t.Cleanup(func() { _ = unmap(base, h.ctlSize) })
	c := newCtl(l, words(base, h.ctlSize))
	c.writeHeader(h.pool, 0)
	c.slotStore(slot, sSerial, h.serial)
	return serveHello(t, h, pick(fds), answer)
}

// serveHello serves, at a temporary socket, the hello h with the descriptors sent, and answers
// each grant request with answer. It returns the path.
func serveHello(t *testing.T, h hello, sent []int, answer func(m msg) msg) string {
	t.Helper()
	return fakeServer(t, func(conn *net.UnixConn) {
		if _, err := readMsg(conn); err != nil {
			return
		}
		if sendFds(conn, h.encode(), sent, time.Second) != nil {
			return
		}
		if m, err := readMsg(conn); err != nil || m.op != opReady {
			return
		}
		_ = writeMsg(conn, msg{op: opReply, a: stOK}, time.Second)
		for {
			m, err := readMsg(conn)
			if err != nil {
				return
			}
			switch m.op {
			case opGrant:
				_ = writeMsg(conn, answer(m), time.Second)
			case opDetach:
				_ = writeMsg(conn, msg{op: opReply, seq: m.seq, a: stOK}, time.Second)
			}
		}
	})
}

// An owner that lends a process a grant it holds already (every request answered with grant
// 0) is refused and cut off: the process never makes two buffers of the same memory. (Its
// second region was lent over its first, and the two buffers overlapped.) The Alloc fails at
// once with ErrProtocol, not out of memory: nothing is full. (The heap tried again after a
// trim, waited for an owner that was cut off, and the user saw out of memory over a deadline.)
func TestOwnerLendingAHeldGrantRefused(t *testing.T) {
	l := layout{regions: 1, regionSize: 8 << 20, grantSize: 2 << 20, slots: 2, ringCap: 4, exports: 4}
	path := fakeOwner(t, l, func(m msg) msg { return msg{op: opReply, seq: m.seq, a: stOK, b: 0} })
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true, Timeout: 100 * time.Millisecond})
	must(t, "Attach", err)
	defer p.Close()
	var bufs [][]byte
	for range 4 {
		b, err := p.Alloc(1<<21 - 4096)
		if err != nil {
			if !errors.Is(err, ErrProtocol) || !errors.Is(err, pinned.ErrRefused) || errors.Is(err, pinmalloc.ErrOutOfMemory) ||
				errors.Is(err, context.DeadlineExceeded) { // (a retry waited for the owner it cut off)
				t.Errorf("Alloc of a grant lent twice: %v, want ErrProtocol, not out of memory", err)
			}
			break
		}
		for _, o := range bufs {
			if a, x := mem.Addr(b), mem.Addr(o); a < x+uintptr(len(o)) && x < a+uintptr(len(b)) {
				t.Fatalf("two buffers of the same memory: %#x+%d and %#x+%d", a, len(b), x, len(o))
			}
		}
		bufs = append(bufs, b)
	}
	if len(bufs) != 1 {
		t.Fatalf("%d buffers allocated from one grant lent again and again, want 1", len(bufs))
	}
	for _, b := range bufs {
		must(t, "Free", p.Free(b))
	}
}
