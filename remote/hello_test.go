package remote

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestHelloOnConnectionRefused: a hello names the address to connect back to only for a Dial,
// whose hello comes on an endpoint UCX made for the dialer; one on an endpoint of a connection
// of this worker's (a client of its listener, connected, saying hello again), or with no
// endpoint to answer on (no honest hello is sent so), is dropped, where it made this worker
// connect to whatever worker address it named: a client of the listener, which need not know
// this worker's address, could make it open an endpoint and a connection for Accept to any.
func TestHelloOnConnectionRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1, w2, _, _, _, c2 := connectedPair(t, ctx)
	hello := dialHello(t, w1)
	for _, ep := range []ucx.Ep{c2.ep, 0} {
		w2.mu.Lock()
		before := len(w2.conns)
		w2.message(ep, hello)
		after, inbound := len(w2.conns), len(w2.inbound)
		w2.mu.Unlock()
		if after != before || inbound != 0 {
			t.Fatalf("a hello on endpoint %#x, of a connection or none, made a connection: %d connections, %d of them for Accept", ep, after, inbound)
		}
	}
}

// TestDialFloodUnclosedBounded: a flood of Dial hellos while every control slot is in flight
// makes no more endpoints once unclosedBound closes wait for a slot: each hello made an
// endpoint and a connection whose acknowledgement found no slot, so it failed and its close
// waited too, and the closes waiting (w.unclosed), with their endpoints and connections, grew
// with every hello, without bound.
func TestDialFloodUnclosedBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1, w2, _, _, _, _ := connectedPair(t, ctx)
	const bound, flood = 8, 64
	hello := dialHello(t, w1)
	w2.mu.Lock()
	w2.unclosedBound = bound
	w2.control += controlSlots // every control slot in flight: no ack is sent, no close starts
	conns := len(w2.conns)
	for i := range flood {
		w2.message(ucx.Ep(1<<40+i), hello) // an endpoint UCX made for each dialer
	}
	unclosed, made := len(w2.unclosed), len(w2.conns)-conns
	w2.control -= controlSlots // the closes waiting start at the next round
	w2.signal()
	w2.mu.Unlock()
	if unclosed > bound || made > bound {
		t.Fatalf("%d dial hellos with every control slot in flight: %d endpoint closes wait, %d connections made, want %d at most",
			flood, unclosed, made, bound)
	}
	if unclosed == 0 {
		t.Fatal("no hello made a connection whose close waits: the flood tested nothing")
	}
	for {
		w2.mu.Lock()
		n := len(w2.unclosed)
		w2.mu.Unlock()
		if n == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d endpoint closes still wait for a slot", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestListenerUnclosedBounded: a listener's client gets no endpoint while unclosedBound
// endpoint closes wait for a control slot: its connection request is rejected, where it was
// accepted and, its acknowledgement finding no slot, its connection failed and its close
// waited too, one more for each client.
func TestListenerUnclosedBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1, w2, _, _, _, _ := connectedPair(t, ctx)
	addr, err := w1.Address()
	if err != nil {
		t.Fatal(err)
	}
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := greeting{conn: 77, worker: w1.id, pid: uint32(os.Getpid()), host: hostID(), addr: addr[addrHeader:]}
	hello := appendGreeting(header(msgHello, 0, helloLen+len(g.addr)), g, true)
	w2.mu.Lock()
	w2.unclosedBound = 1
	w2.control += controlSlots // every control slot in flight: no ack is sent, no close starts
	w2.message(ucx.Ep(1<<40), hello)
	filled := len(w2.unclosed)
	w2.mu.Unlock()
	restored := false
	restore := func() {
		if !restored {
			restored = true
			w2.control -= controlSlots
			w2.signal()
		}
	}
	defer func() {
		w2.mu.Lock()
		restore()
		w2.mu.Unlock()
	}()
	if filled != 1 {
		t.Fatalf("a dial hello with every control slot in flight: %d endpoint closes wait, want 1", filled)
	}
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	defer ccancel()
	if c, err := w1.Connect(cctx, l.Addr()); err == nil {
		t.Fatalf("a client connected with every control slot in flight: %v", c)
	}
	w2.mu.Lock()
	pending, unclosed := len(w2.pending), len(w2.unclosed)
	restore()
	w2.mu.Unlock()
	if pending != 0 || unclosed > 1 {
		t.Fatalf("a listener's client with %d endpoint close waiting (the bound): %d endpoints wait for a hello, %d closes wait, want none and 1",
			filled, pending, unclosed)
	}
}

// dialHello returns the hello of a Dial from w, naming w's address to connect back to, as a
// peer sends it.
func dialHello(t *testing.T, w *Worker) []byte {
	t.Helper()
	addr, err := w.Address()
	if err != nil {
		t.Fatal(err)
	}
	g := greeting{conn: 77, worker: w.id, pid: uint32(os.Getpid()), host: hostID(), addr: addr[addrHeader:]}
	return appendGreeting(header(msgHello, 0, helloLen+len(g.addr)), g, true)
}
