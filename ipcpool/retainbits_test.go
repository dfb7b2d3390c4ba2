package ipcpool

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// A retain bit is a word of the control region: a hostile process sets one in another
// process's entry, for a slot no process holds, or for its own slot while it clears its
// flagRetains (the owner then skips its bits as it leaves), or for the owner's slot (never
// free) though the owner holds no retain of it. The entry's holder frees the
// buffer and leaves: the buffer is an orphan, retained by nobody attached, and its grants
// must come back all the same. (Before, settleOrphans waited for the bit's holder, which
// never comes: the grants stayed orphaned for good, one buffer of every process at a time.)
func TestForgedRetainBitsLeakNoGrants(t *testing.T) {
	for _, forge := range []string{"a free slot", "its own slot, flag cleared", "the owner's slot"} {
		t.Run(forge, func(t *testing.T) {
			w, path := serveTest(t, Options{Size: 16 << 20, GrantSize: 2 << 20, Slots: 4})
			p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
			must(t, "Attach", err)
			bad, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
			must(t, "Attach hostile", err)
			b, err := p.Alloc(5000)
			must(t, "Alloc", err)
			h, err := p.Handle(b)
			must(t, "Handle", err)
			c := &bad.c
			slot := 3 // no process
			switch forge {
			case "its own slot, flag cleared":
				slot = bad.slot
				c.slotStore(bad.slot, sFlags, 0)
			case "the owner's slot": // never free: the owner knows its own retains
				slot = 0
			}
			i, bit := c.retainWord(int(h.Entry), slot)
			c.store(i, c.load(i)|bit)
			_ = bad.Close()
			must(t, "Free", p.Free(b)) // not the last reference: the forged bit keeps it
			_ = p.Close()              // (its buffer still live: given up)
			waitFor(t, func() bool { return w.Attached() == 0 })
			deadline := time.Now().Add(3 * time.Second)
			for {
				ps := w.SharedStats().Pool
				if ps.Orphaned == 0 && ps.Limbo == 0 && ps.Held == w.src.grantsHeld() {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("grants of a process gone kept by a forged retain bit: %+v", ps)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}

// A peer maps the pool before it says it is ready: it may set retain bits of its slot (and
// flagRetains) then, and leave before its ready (an abort here, or silence, or garbage). The
// owner frees its slot at once, and its bits with it: they keep no buffer. (Before, they
// stayed: the owner's buffer it retained so stayed live after the owner's Free, its grant
// with it, for as long as the owner ran.)
func TestRetainBitsBeforeReadyLetGo(t *testing.T) {
	w, path := serveTest(t, Options{Size: 8 << 20, GrantSize: 2 << 20, Slots: 2})
	b, err := w.Alloc(5000)
	must(t, "Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	must(t, "dial", err)
	defer c.Close()
	must(t, "intro", writeMsg(c, msg{op: opIntro, flags: introAttach, seq: wireVersion, a: ctlMagic}, time.Second))
	hb := make([]byte, 8*helloWords)
	n, fds, err := recvFds(c, hb, 1+maxRegions)
	must(t, "hello", err)
	closeFds(fds)
	hl, err := decodeHello(hb[:n])
	must(t, "decode the hello", err)
	// The peer's words, written here through the owner's mapping of the same control region.
	w.c.slotStore(hl.slot, sFlags, flagRetains)
	w.c.setRetain(int(h.Entry), hl.slot, true)
	must(t, "abort", writeMsg(c, msg{op: opAbort}, time.Second))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf [64]byte
	for { // the owner hangs up once it has freed the slot
		if _, err := c.Read(buf[:]); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the owner did not close the connection")
			}
			break
		}
	}
	must(t, "Free", w.Free(b))
	if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("the owner's buffer freed, retained by bits of a peer that left before its ready: "+
			"Bytes of its handle: %v, want ErrStaleHandle", err)
	}
}
