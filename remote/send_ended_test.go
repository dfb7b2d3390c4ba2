package remote

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestSendEndsWithItsConnection: Send waited for UCX to have sent its message, or for its ctx,
// and nothing else. Over shared memory (SharedMemory: no failure handling of UCX's, the close
// of a failed connection's endpoint is not forced) a message to a peer that stalls stays in
// UCX for as long as the peer stalls, so a Send without a deadline hung after its connection
// had failed. It returns the connection's error once the connection ends (the message is
// UCX's copy, which the slot keeps until UCX lets go of it).
func TestSendEndsWithItsConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sp := newStalledPair(t, ctx, Options{}, nil)
	ws, c := sp.ws, sp.c
	sp.stall()

	sent := make(chan error, 1)
	go func() { sent <- c.Send(context.Background(), make([]byte, ws[0].opts.MaxMessage)) }()
	w := ws[0]
	for { // the message is in UCX's hands, and stays there while the peer stalls
		w.mu.Lock()
		inflight := c.msgSlots
		w.mu.Unlock()
		if inflight > 0 {
			break
		}
		select {
		case err := <-sent:
			t.Fatalf("Send returned %v to a stalled peer", err)
		case <-ctx.Done():
			t.Fatal("the message never went in flight")
		case <-time.After(time.Millisecond):
		}
	}
	w.mu.Lock()
	w.failConn(c, errors.Join(ErrProtocol, errors.New("the test fails it")))
	w.mu.Unlock()
	select {
	case err := <-sent:
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("Send returned %v; want the connection's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Send still waits, 5 s after its connection failed")
	}
}
