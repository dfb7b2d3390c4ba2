package remote

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestUnreceivedBoundedPerWorker: the messages nobody received are bounded for the worker, not
// only per connection: a peer that opens many connections, each kept under the connection's
// bound (queuedMessages), made the worker hold that bound times the connections. Past the
// worker's bound (queuedWorker), the connection holding the most fails with ErrProtocol and its
// messages are dropped (TestWorkerBoundFailsLargestHolder); the worker never holds more, and
// every byte received gives its room back.
func TestUnreceivedBoundedPerWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w2, conns := manyConns(t, ctx, 8)
	const body = 1 << 20
	perConn := (queuedMessages - 2*body) / (body + msgOverhead) // under each connection's bound
	// The peer's messages, as the progress goroutine hands them over: one buffer for all, which
	// the queue keeps without a copy, so that the test itself holds 1 MiB.
	ms := make([][]byte, len(conns))
	for i, c := range conns {
		ms[i] = append(header(msgData, c.id, body), make([]byte, body)...)
	}
	w2.mu.Lock()
	most, sent := 0, 0
	for i := range conns {
		for range perConn {
			w2.message(0, ms[i])
			sent++
			most = max(most, w2.queued)
		}
	}
	w2.mu.Unlock()
	if most > queuedWorker {
		t.Fatalf("the worker held %d bytes of messages nobody received, beyond its bound %d",
			most, queuedWorker)
	}
	failed := 0
	for i, c := range conns {
		if err := c.Err(); err != nil {
			failed++
			if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "the most") {
				t.Fatalf("connection %d ended with %v; want ErrProtocol, the bound", i, err)
			}
			continue
		}
		for n := range perConn {
			if _, err := c.Recv(ctx); err != nil {
				t.Fatalf("connection %d: Recv after %d messages: %v", i, n, err)
			}
		}
	}
	if failed == 0 {
		t.Fatalf("%d connections were sent %d MiB of messages nobody received, and all are open",
			len(conns), sent*body>>20)
	}
	t.Logf("%d connections failed of %d, sent %d MiB", failed, len(conns), sent*body>>20)
	w2.mu.Lock()
	left := w2.queued
	w2.mu.Unlock()
	if left != 0 {
		t.Fatalf("every message received or dropped, the worker still counts %d bytes queued", left)
	}
}

// manyConns returns a worker w2 and n connections of it to one other worker, accepted by w2.
func manyConns(t *testing.T, ctx context.Context, n int) (*Worker, []*Conn) {
	t.Helper()
	w1, w2, _, _, _, first := connectedPair(t, ctx)
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := []*Conn{first}
	for len(conns) < n {
		if _, err := w1.Connect(ctx, l.Addr()); err != nil {
			t.Fatal(err)
		}
		c, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	return w2, conns
}
