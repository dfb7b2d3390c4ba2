package ipcpool

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// A process the owner cuts off mid-grant (its grant's reply written in part: the owner takes
// that grant back) keeps what it holds by its own record, and only that: every grant its
// record has is kept from the others (limbo) while it lives, for it may still write them;
// the grant whose reply it never read whole is in no record of its, and is the owner's to
// lend again. No grant is in the process's record and free in the owner's table, or lent to
// a process attached after the cut.
func TestCutMidGrantKeepsWhatTheProcessHolds(t *testing.T) {
	watchSelf = true // the process is this one: watched as another, alive
	t.Cleanup(func() { watchSelf = false })
	w, path := serveTest(t, Options{})
	p := attachTest(t, path, AttachOptions{Timeout: time.Second})
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	fillSeq(b, 5)

	// The first grant lent has its reply go out in part; only that one (a second process's
	// grants below are written whole).
	torn := make(chan uint64, 1)
	var tore atomic.Bool
	t.Cleanup(func() { connWrite = (*net.UnixConn).Write })
	connWrite = func(c *net.UnixConn, m []byte) (int, error) {
		if len(m) == msgSize && binary.LittleEndian.Uint32(m) == opReply && binary.LittleEndian.Uint64(m[8:]) != 0 &&
			binary.LittleEndian.Uint64(m[16:]) == stOK && !tore.Swap(true) {
			torn <- binary.LittleEndian.Uint64(m[24:])
			n, _ := c.Write(m[:msgSize/2])
			return n, io.ErrShortWrite
		}
		return c.Write(m)
	}
	_, err = p.cl.grant(1)
	if !errors.Is(err, ErrClosed) {
		t.Errorf("a grant whose reply went out in part: %v; want ErrClosed (cut off, alive)", err)
	}
	var g int
	select {
	case v := <-torn:
		g = int(v)
	default:
		t.Fatal("no grant reply written in part")
	}
	waitFor(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.procs[p.slot].used
	})

	p.cl.mu.Lock()
	var record []int
	for i, h := range p.cl.holds {
		if h {
			record = append(record, i)
		}
	}
	p.cl.mu.Unlock()
	inRecord := map[int]bool{}
	for _, i := range record {
		inRecord[i] = true
	}
	for _, i := range heldGrants(p) {
		if !inRecord[i] {
			t.Errorf("grant %d in the process's pool but not its record", i)
		}
	}
	w.mu.Lock()
	for _, i := range record {
		if i == g {
			t.Errorf("grant %d, whose reply the process never read whole, is in its record", g)
		}
		if s := w.table[i].state; s != gLimbo && s != gOrphan {
			t.Errorf("grant %d of the process cut off, alive: state %d, want in limbo", i, s)
		}
	}
	if s := w.table[g].state; s != gFree {
		t.Errorf("grant %d, whose reply went out in part: state %d, want free (nobody holds it)", g, s)
	}
	w.mu.Unlock()
	q := attachTest(t, path, AttachOptions{Timeout: 100 * time.Millisecond})
	lent := 0
	for {
		h, err := q.cl.grant(1)
		if err != nil {
			// None left: the owner says so after waiting the timeout for one, or, on a
			// loaded machine, the answer comes after the process stopped waiting.
			if !errors.Is(err, ErrPoolFull) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a grant to a process attached after the cut: %v; want ErrPoolFull once none is left", err)
			}
			break
		}
		lent++
		for _, i := range record {
			if h == i {
				t.Fatalf("grant %d lent to another process while the process cut off, alive, holds it", h)
			}
		}
	}
	if lent == 0 {
		t.Error("no grant lent to a process attached after the cut: nothing was checked")
	}
	checkSeq(t, b, 5)
	must(t, "Free after the cut", p.Free(b))
}
