package remote

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestListenerCloseEndsUnaccepted: a connection a listener took whose Accept never came is
// ended by the listener's Close, where it stayed open for the worker's life, owned by nobody:
// no Accept can return it any more, nobody can close it, and its peer, told nothing, could
// go on filling its queues (64 MiB of messages for Recv, answers) for good. The peer is told.
func TestListenerCloseEndsUnaccepted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	needUCX(t)
	w1, w2 := newWorker(t), newWorker(t)
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c1, err := w1.Connect(ctx, l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	w2.mu.Lock()
	var c2 *Conn
	for _, c := range w2.conns {
		c2 = c
	}
	w2.mu.Unlock()
	if c2 == nil {
		t.Fatal("the listener's worker has no connection")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c2.Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a connection never accepted is still open after its listener's Close (its error %v)", err)
	}
	if _, err := l.Accept(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close: %v, want ErrClosed", err)
	}
	if _, err := c1.Recv(ctx); !errors.Is(err, ErrClosed) && !errors.Is(err, ErrPeer) {
		t.Fatalf("the peer's Recv: %v: it was not told its connection ended", err)
	}
}
