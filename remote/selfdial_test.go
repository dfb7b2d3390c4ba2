package remote

import (
	"context"
	"testing"
	"time"
)

// TestSelfDialIsNotCrossed: a worker that Dials its own address gets no connection that is its
// own peer. UCX hands the hello of such a Dial to the worker on the Dial's own endpoint, where
// crossed took it for the answer of a worker that dialed back: the Dial returned a connection
// whose peer was itself (its messages and acknowledgement landing on it), which no Accept
// returned. Before crossed, and again now, that hello is dropped there: the Dial times out.
func TestSelfDialIsNotCrossed(t *testing.T) {
	needUCX(t)
	w := newWorker(t)
	addr, err := w.Address()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	c, err := w.Dial(ctx, addr)
	if err == nil && c.peer == w.id && c.peerID == c.id {
		t.Fatalf("Dial of the worker's own address returned connection %x, its own peer", c.id)
	}
}
