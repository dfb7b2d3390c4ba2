package remote

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestCrossedDials: two workers that Dial each other at once (symmetric peers at start-up)
// both connect. Neither makes a round of progress until both have sent their hello, so each
// hello arrives on the endpoint the other's Dial made (UCX matches the two endpoints by worker
// and count): each hello was dropped there as one on a connection's endpoint, and both Dials
// timed out. Now each Dial takes the other's hello as its answer: the two Dials return the two
// ends of one connection (as TCP's simultaneous open), which carries messages, puts and gets
// both ways, and no Accept returns it. A hello on such a connection again, or from another
// worker, makes nothing.
func TestCrossedDials(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	needUCX(t)
	ws := []*Worker{newWorker(t), newWorker(t)}
	regs := make([]*Registration, 2)
	addrs := make([][]byte, 2)
	gate := make(chan struct{})
	var opened bool
	defer func() {
		if !opened {
			close(gate)
		}
	}()
	for i, w := range ws {
		p, err := testPool(nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		if regs[i], err = w.Register(p); err != nil {
			t.Fatal(err)
		}
		if addrs[i], err = w.Address(); err != nil {
			t.Fatal(err)
		}
		w.mu.Lock()
		w.paused = gate
		w.mu.Unlock()
	}
	type dialed struct {
		c   *Conn
		err error
	}
	res := make([]chan dialed, 2)
	for i, w := range ws {
		res[i] = make(chan dialed, 1)
		go func() {
			c, err := w.Dial(ctx, addrs[1-i])
			res[i] <- dialed{c, err}
		}()
	}
	for _, w := range ws { // each Dial has sent its hello (under mu, with its connection made)
		for {
			w.mu.Lock()
			n := len(w.conns)
			w.mu.Unlock()
			if n == 1 {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("a Dial made no connection")
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, w := range ws {
		w.mu.Lock()
		w.paused = nil
		w.mu.Unlock()
	}
	close(gate)
	opened = true
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	defer dcancel()
	conns := make([]*Conn, 2)
	for i := range ws {
		select {
		case r := <-res[i]:
			if r.err != nil {
				t.Fatalf("worker %d's Dial of the other, crossing the other's: %v", i, r.err)
			}
			conns[i] = r.c
		case <-dctx.Done():
			t.Fatalf("worker %d's Dial of the other, crossing the other's, did not return", i)
		}
	}
	for i, c := range conns {
		if c.Peer() != ws[1-i].ID() {
			t.Fatalf("worker %d's connection leads to worker %016x, not %016x", i, c.Peer(), ws[1-i].ID())
		}
	}
	// Both ways: a message, a put and a get, every byte checked.
	for i, c := range conns {
		peer := conns[1-i]
		src, err := regs[i].pool.Alloc(256 << 10)
		if err != nil {
			t.Fatal(err)
		}
		dst, err := regs[1-i].pool.Alloc(256 << 10)
		if err != nil {
			t.Fatal(err)
		}
		fill(src, uint64(i+1))
		d, err := regs[1-i].Describe(dst)
		if err != nil {
			t.Fatal(err)
		}
		b, err := d.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := peer.Send(ctx, b); err != nil {
			t.Fatalf("worker %d: Send: %v", 1-i, err)
		}
		m, err := c.Recv(ctx)
		if err != nil {
			t.Fatalf("worker %d: Recv: %v", i, err)
		}
		got, _, err := ParseDescriptor(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Put(ctx, src, got); err != nil {
			t.Fatalf("worker %d: Put: %v", i, err)
		}
		if !bytes.Equal(src, dst) {
			t.Fatalf("worker %d's put: the bytes differ", i)
		}
		fill(dst, uint64(i+7))
		if err := c.Get(ctx, src, got); err != nil {
			t.Fatalf("worker %d: Get: %v", i, err)
		}
		if !bytes.Equal(src, dst) {
			t.Fatalf("worker %d's get: the bytes differ", i)
		}
		if err := errors.Join(regs[i].pool.Free(src), regs[1-i].pool.Free(dst)); err != nil {
			t.Fatal(err)
		}
	}
	// One connection, not two: no Accept returns one, and a hello on its endpoint again (or
	// from a worker it does not lead to) makes none. Each side's acknowledgement of the other's
	// hello came before the messages it sent after it, and was taken.
	for i, w := range ws {
		w.mu.Lock()
		n, in, crossed := len(w.conns), len(w.inbound), conns[i].crossed
		w.mu.Unlock()
		if n != 1 || in != 0 || crossed {
			t.Fatalf("worker %d: %d connections, %d of them for Accept, after the crossed Dials; the peer's acknowledgement awaited still: %v", i, n, in, crossed)
		}
	}
	for _, worker := range []uint64{ws[1].ID(), 12345} {
		g := greeting{conn: 99, worker: worker, pid: uint32(os.Getpid()), host: hostID(), addr: addrs[1][addrHeader:]}
		hello := appendGreeting(header(msgHello, 0, helloLen+len(g.addr)), g, true)
		w, c := ws[0], conns[0]
		w.mu.Lock()
		w.message(c.ep, hello)
		n, in, peerID, state := len(w.conns), len(w.inbound), c.peerID, c.state
		w.mu.Unlock()
		if n != 1 || in != 0 || peerID == 99 || state != connOpen {
			t.Fatalf("a hello on a crossed connection's endpoint: %d connections, %d for Accept, peer connection %d, state %d", n, in, peerID, state)
		}
	}
	if err := conns[0].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := conns[1].Recv(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Recv after the peer's Close: %v", err)
	}
}
