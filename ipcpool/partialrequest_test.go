package ipcpool

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// tearOp makes the next message of operation op that this process writes go out in part
// (errPartial), once; every other write goes whole. It is undone at cleanup.
func tearOp(t *testing.T, op uint32) (torn func() bool) {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() { connWrite = (*net.UnixConn).Write }) // (after the Closes)
	connWrite = func(c *net.UnixConn, b []byte) (int, error) {
		if len(b) == msgSize && binary.LittleEndian.Uint32(b) == op {
			select {
			case <-done:
			default:
				close(done)
				n, _ := c.Write(b[:msgSize/2])
				return n, io.ErrShortWrite
			}
		}
		return c.Write(b)
	}
	return func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// checkCutKeepsGrants checks that the owner has taken p for cut off, alive: p's connection is
// closed at both ends (the owner reads no torn message's tail as the next one's head), every
// grant p's pool holds is kept from the others (limbo) and p's buffer b still holds seed's
// bytes, and a process attached after the cut is lent none of them.
func checkCutKeepsGrants(t *testing.T, w *Owner, p *Process, path string, kept []int) {
	t.Helper()
	waitFor(t, func() bool {
		p.cl.mu.Lock()
		defer p.cl.mu.Unlock()
		return p.cl.c == nil || p.cl.orphaned != nil
	})
	waitFor(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.procs[p.slot].used
	})
	w.mu.Lock()
	for _, g := range kept {
		if s := w.table[g].state; s != gLimbo && s != gOrphan {
			t.Errorf("grant %d of the process cut off, alive: state %d, want in limbo", g, s)
		}
	}
	w.mu.Unlock()
	q := attachTest(t, path, AttachOptions{Timeout: 100 * time.Millisecond})
	for {
		g, err := q.cl.grant(1)
		if err != nil {
			if !errors.Is(err, ErrPoolFull) {
				t.Errorf("the next process's grant: %v; want ErrPoolFull once the others are lent", err)
			}
			break
		}
		for _, k := range kept {
			if g == k {
				t.Fatalf("grant %d lent to another process while the process cut off, alive, holds it", g)
			}
		}
	}
}

// heldGrants returns the grants p's pool holds.
func heldGrants(p *Process) []int {
	p.src.mu.Lock()
	defer p.src.mu.Unlock()
	var gs []int
	for g, h := range p.src.held {
		if h {
			gs = append(gs, g)
		}
	}
	return gs
}

// A process whose grant request goes out in part (errPartial) cuts its connection: the owner
// would read the rest of the stream a torn message off. The request fails (the owner, alive,
// takes no rejoin of a process it still knows: ErrClosed), the owner keeps the process's
// grants from the others while it lives (limbo), and its buffers stay its own, their bytes
// intact and freed without error.
func TestProcessGrantRequestWrittenInPartCutsTheConnection(t *testing.T) {
	watchSelf = true // the process is this one: watched as another, alive
	t.Cleanup(func() { watchSelf = false })
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: time.Second})
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	fillSeq(b, 7)
	kept := heldGrants(p)
	if len(kept) == 0 {
		t.Fatal("the process holds no grant after an Alloc")
	}

	torn := tearOp(t, opGrant)
	_, err = p.cl.grant(1)
	if !torn() {
		t.Fatal("no grant request written in part")
	}
	if !errors.Is(err, ErrClosed) {
		t.Errorf("a grant whose request went out in part: %v; want ErrClosed (cut off, alive)", err)
	}
	checkCutKeepsGrants(t, w, p, path, kept)
	checkSeq(t, b, 7)
	must(t, "Free after the cut", p.Free(b))
}

// A process whose release goes out in part (errPartial) cuts its connection as for a request:
// the grant it gave back, which the owner never read, is kept from the others while the
// process lives, as its other grants are, never lent twice.
func TestProcessReleaseWrittenInPartCutsTheConnection(t *testing.T) {
	watchSelf = true // the process is this one: watched as another, alive
	t.Cleanup(func() { watchSelf = false })
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: time.Second})
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	fillSeq(b, 9)
	g, err := p.cl.grant(1)
	must(t, "grant", err)
	kept := append(heldGrants(p), g)

	torn := tearOp(t, opRelease)
	p.cl.release(g, 1)
	if !torn() {
		t.Fatal("no release written in part")
	}
	checkCutKeepsGrants(t, w, p, path, kept)
	checkSeq(t, b, 9)
	must(t, "Free after the cut", p.Free(b))
}
