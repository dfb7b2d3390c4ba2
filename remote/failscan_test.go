package remote

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestConnFailureCost: a connection with nothing in flight fails, or is abandoned, without a
// look at every slot of the worker: failConn scanned all of them (2*MaxInFlight+1,024, some two
// million at MaxInFlight 1<<20) for the operations waiting for the peer's answer, and
// abandonSlots for those in flight, under the worker's mutex, so a peer that opened and failed
// connections (a bad acknowledgement, a malformed message) cost the worker milliseconds each.
func TestConnFailureCost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, c1 := answerCheckWorker(t, 1<<16)
	peer := newWorker(t)
	l, err := w.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Connect(ctx, l.Addr()); err != nil {
		t.Fatal(err)
	}
	c2, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	before := w.scanned
	w.failConn(c1, fmt.Errorf("%w: a test", ErrProtocol))
	if n := w.scanned - before; n != 0 {
		t.Errorf("a connection with nothing in flight failed looking at %d slots, want 0", n)
	}
	before = w.scanned
	w.abandonConn(c2, fmt.Errorf("%w: a test", ErrPeer))
	if n := w.scanned - before; n != 0 {
		t.Errorf("a connection with nothing in flight was abandoned looking at %d slots, want 0", n)
	}
}
