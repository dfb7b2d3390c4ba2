package ipcpool

import (
	"context"
	"net"
	"testing"
	"time"
)

// Any process allowed on the socket may ask to rejoin as anything: refused, its claims are
// kept until it exits (keepClaims). A grant orphaned under a buffer others still retain (one
// an adoption found: fromWords) is claimable by a process that rejoins as the words say; a
// refused claimant must not take it out of the orphan's keeping, or it is freed, and lent
// again, as soon as the claimant exits, while the buffer is still retained. (Before, a
// hostile process's refused rejoin moved the orphan to its own limbo: freed once it exited.)
func TestRefusedRejoinTakesNoOrphan(t *testing.T) {
	w, path := serveTest(t, Options{Size: 16 << 20, GrantSize: 2 << 20, Slots: 4})
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	b, err := p.Alloc(5000)
	must(t, "Alloc", err)
	fill(b, 3)
	h, err := p.Handle(b)
	must(t, "Handle", err)
	must(t, "Retain", w.Retain(h))
	rb, err := w.Bytes(h)
	must(t, "Bytes", err)
	must(t, "Free", p.Free(b))
	_ = p.Close()
	waitFor(t, func() bool { return w.Attached() == 0 && w.SharedStats().Pool.Orphaned > 0 })
	// As an adoption leaves it (adoptOrphans, finishAdoption): an orphan the words gave.
	w.mu.Lock()
	var orphans []int
	for g := range w.table {
		if t := w.table[g]; t.state == gOrphan {
			t.gone.fromWords = true
			orphans = append(orphans, g)
		}
	}
	pool := w.hello.pool
	w.mu.Unlock()
	// A hostile process rejoins as a slot it is not, claiming the orphan's grants.
	c := dialOwner(t, path)
	sendRejoin(t, c, pool, 1, 12345)
	if m, err := readMsg(c); err != nil || m.a != stClaims {
		t.Fatalf("the owner's answer to the rejoin: %+v %v", m, err)
	}
	for _, g := range orphans {
		must(t, "claim", writeMsg(c, msg{op: opClaim, a: uint64(g), b: 1}, 0))
	}
	must(t, "end", writeMsg(c, msg{op: opClaim}, 0))
	if m, err := readMsg(c); err != nil || m.a != stRefused {
		t.Fatalf("a rejoin as another: %+v %v, want a refusal", m, err)
	}
	c.Close()
	w.waitRounds(10) // owner rounds: the claimant (this process) has exited
	w.mu.Lock()
	for _, g := range orphans {
		if st := w.table[g].state; st != gOrphan {
			w.mu.Unlock()
			t.Fatalf("grant %d under a retained buffer is %d after a refused claim, not an orphan", g, st)
		}
	}
	w.mu.Unlock()
	if err := verify(rb, 3); err != nil {
		t.Fatal(err)
	}
	must(t, "Release", w.Release(h))
	waitFor(t, func() bool { return w.SharedStats().Pool.Orphaned == 0 })
}

// dialOwner connects to the owner's socket at path as a raw peer, with a deadline of five
// seconds for what the test then says and reads; the connection closes with the test.
func dialOwner(t *testing.T, path string) *net.UnixConn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	must(t, "dial", err)
	c := nc.(*net.UnixConn)
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	return c
}

// donateTo connects to the owner at path once it listens, rejoins pool as slot 1, serial 1,
// is asked for the pool's descriptors (stDonate) and sends fds as its donation: the connection,
// closed when the test ends, then waits for the owner's answer.
func donateTo(t *testing.T, path string, pool uint64, fds []int) *net.UnixConn {
	t.Helper()
	var conn *net.UnixConn
	waitFor(t, func() bool {
		nc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		conn = nc
		return err == nil
	})
	t.Cleanup(func() { conn.Close() })
	sendRejoin(t, conn, pool, 1, 1)
	m, err := readMsg(conn)
	if err != nil || m.op != opReply || m.a != stDonate {
		t.Fatalf("the owner's answer to a rejoin: %+v %v, want stDonate", m, err)
	}
	b := msg{op: opDonate}.encode()
	must(t, "donate", sendFds(conn, b[:], fds, time.Second))
	return conn
}

// sendRejoin says, on c, that the peer rejoins pool as slot with serial (an intro and a rejoin
// message), as a process of the previous owner would.
func sendRejoin(t *testing.T, c *net.UnixConn, pool, slot, serial uint64) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	must(t, "intro", writeMsg(c, msg{op: opIntro, flags: introRejoin, seq: wireVersion, a: ctlMagic, b: pool}, 0))
	must(t, "rejoin", writeMsg(c, msg{op: opRejoin, a: slot, b: serial}, 0))
}
