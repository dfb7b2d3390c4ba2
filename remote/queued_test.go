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
// worker's bound (queuedWorker), the connection whose message crosses it fails with
// ErrProtocol; Recv still returns what it queued, and every byte received gives its room back.
func TestUnreceivedBoundedPerWorker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1, w2, _, _, _, first := connectedPair(t, ctx)
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := []*Conn{first}
	for range 7 {
		if _, err := w1.Connect(ctx, l.Addr()); err != nil {
			t.Fatal(err)
		}
		c, err := l.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	const body = 1 << 20
	perConn := (queuedMessages - 2*body) / (body + msgOverhead) // under each connection's bound
	// The peer's messages, as the progress goroutine hands them over: one buffer for all, which
	// the queue keeps without a copy, so that the test itself holds 1 MiB.
	ms := make([][]byte, len(conns))
	for i, c := range conns {
		ms[i] = append(header(msgData, c.id, body), make([]byte, body)...)
	}
	w2.mu.Lock()
	failed, sent := -1, 0
	for i, c := range conns {
		for range perConn {
			w2.message(0, ms[i])
			sent++
			if c.state != connOpen {
				failed = i
				break
			}
		}
		if failed >= 0 {
			break
		}
	}
	w2.mu.Unlock()
	if failed < 0 {
		t.Fatalf("%d connections hold %d MiB of messages nobody received, and all are open",
			len(conns), sent*body>>20)
	}
	err = conns[failed].Err()
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "this worker's connections") {
		t.Fatalf("connection %d ended with %v; want ErrProtocol, the worker's bound", failed, err)
	}
	t.Logf("connection %d failed after %d MiB: %v", failed, sent*body>>20, err)
	for i, c := range conns[:failed+1] {
		for n := 0; ; n++ {
			if _, err := c.Recv(ctx); err != nil {
				if i < failed {
					t.Fatalf("connection %d: Recv after %d messages: %v", i, n, err)
				}
				break
			}
			if i < failed && n == perConn-1 {
				break
			}
		}
	}
	w2.mu.Lock()
	left := w2.queued
	w2.mu.Unlock()
	if left != 0 {
		t.Fatalf("every message received, the worker still counts %d bytes queued", left)
	}
}
