package remote

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAcceptAfterCloseIsClosed: after the worker's Close, Accept (the worker's, for Dial, and a
// listener's) says ErrClosed, where a connection that came before the Close and was never
// accepted was still queued for it, and Accept, choosing at random among what was ready,
// returned it, ended, as a new connection, with no error.
func TestAcceptAfterCloseIsClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	needUCX(t)
	w1, w2 := newWorker(t), newWorker(t)
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Connect(ctx, l.Addr()); err != nil {
		t.Fatal(err)
	}
	a, err := w2.Address()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w1.Dial(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	if n, m := len(w2.inbound), len(l.accepted); n != 0 || m != 0 {
		t.Fatalf("after the worker's Close, %d connections wait for its Accept and %d for its listener's", n, m)
	}
	for range 8 {
		if c, err := w2.Accept(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("the worker's Accept after its Close: %v, %v", c, err)
		}
		if c, err := l.Accept(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("the listener's Accept after the worker's Close: %v, %v", c, err)
		}
	}
}
