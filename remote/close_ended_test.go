package remote

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCloseLetsGoOfAnEndedConnsStall: with SharedMemory, a worker's Close abandons its
// connections, so that what a peer that stalls keeps in UCX (messages, answers, puts: the
// close of an endpoint there is not forced, and waits for them) does not hold up the Close.
// A connection that had failed before the Close (a protocol error, AnswerTimeout, the peer's
// goodbye) was left out: its message stayed in flight, the Close waited 10 s for it, returned
// ErrBusy and left UCX's worker and the buffers it held as they were. It is abandoned too now.
func TestCloseLetsGoOfAnEndedConnsStall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sp := newStalledPair(t, ctx, Options{}, nil)
	ws, c := sp.ws, sp.c
	sp.stall()
	sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := c.Send(sctx, make([]byte, ws[0].opts.MaxMessage)) // beyond the peer's FIFO: stays in flight
	scancel()
	w := ws[0]
	w.mu.Lock()
	inflight := c.msgSlots
	if inflight > 0 {
		w.failConn(c, errors.Join(ErrProtocol, errors.New("the test fails it")))
	}
	w.mu.Unlock()
	if inflight == 0 {
		t.Fatalf("the message to a stalled peer is not in flight (Send: %v)", err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close still waits, 5 s on, for the message of a connection that failed before it")
	}
}
