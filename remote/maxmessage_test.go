package remote

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRecvEnforcesMaxMessage: a peer's message beyond the receiver's MaxMessage fails the
// connection with ErrProtocol, dropped by UCX's callback as it is delivered (counted in
// MessagesDropped), never queued for Recv; one of exactly MaxMessage bytes is received. Only the
// queue's bound of 64 MiB applied: the receiver queued and returned a message far above what it
// said it takes. 4 KiB (one fragment over TCP) and 1 MiB (assembled by UCX from fragments).
func TestRecvEnforcesMaxMessage(t *testing.T) {
	for _, max := range []int{4 << 10, 1 << 20} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c1, c2, w2 := maxMessagePair(t, ctx, max)
		exact := bytes.Repeat([]byte{0xa5}, max)
		if err := c1.Send(ctx, exact); err != nil {
			t.Fatal(err)
		}
		if m, err := c2.Recv(ctx); err != nil || !bytes.Equal(m, exact) {
			t.Fatalf("MaxMessage %d: a message of exactly MaxMessage bytes: %d bytes, %v", max, len(m), err)
		}
		dropped := w2.Stats().MessagesDropped
		if err := c1.Send(ctx, append(exact, 1)); err != nil {
			t.Fatal(err) // the sender's own MaxMessage is larger
		}
		m, err := c2.Recv(ctx)
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("MaxMessage %d: a message of MaxMessage+1 bytes: Recv returned %d bytes, %v; want ErrProtocol", max, len(m), err)
		}
		if n := strings.Count(err.Error(), "protocol error"); n != 1 {
			t.Errorf("the error says its cause %d times: %v", n, err)
		}
		w2.mu.Lock()
		queued, qbytes := len(c2.msgs), *c2.msgBytes
		w2.mu.Unlock()
		if queued != 0 || qbytes != 0 {
			t.Errorf("MaxMessage %d: %d messages (%d bytes) queued after the refusal", max, queued, qbytes)
		}
		if w2.Stats().MessagesDropped == dropped {
			t.Errorf("MaxMessage %d: no message dropped by the callback: the message was copied and queued before it was refused", max)
		}
		t.Logf("MaxMessage %d: %v", max, err)
		cancel()
	}
}

// TestRecvLargestMessage: a message of the largest MaxMessage a worker takes (64 MiB) is
// received whole, twice. The callback's queue and the connection's queue for Recv were bounded
// at 64 MiB, below one such message with its header: the callback dropped it, uncounted by
// anyone but MessagesDropped, and Recv waited for it forever.
func TestRecvLargestMessage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c1, c2, _ := maxMessagePair(t, ctx, maxMessage)
	big := bytes.Repeat([]byte{0x5a}, maxMessage)
	for i := range 2 {
		if err := c1.Send(ctx, big); err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		m, err := c2.Recv(rctx)
		rcancel()
		if err != nil || !bytes.Equal(m, big) {
			t.Fatalf("message %d of MaxMessage (%d) bytes: received %d bytes, %v", i, maxMessage, len(m), err)
		}
	}
}

// TestRecvEnforcesMaxMessageQueued: a message beyond MaxMessage that reaches the protocol's
// handler (the callback's limit is the first check, this the second) fails the connection too,
// and is not queued.
func TestRecvEnforcesMaxMessageQueued(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, c2, w2 := maxMessagePair(t, ctx, 4<<10)
	w2.mu.Lock()
	w2.message(0, append(header(msgData, c2.id, 0), make([]byte, 4<<10+1)...))
	queued, err := len(c2.msgs), c2.err
	w2.mu.Unlock()
	if queued != 0 || !errors.Is(err, ErrProtocol) {
		t.Fatalf("a message of MaxMessage+1 bytes: %d queued, the connection's error %v; want none queued, ErrProtocol", queued, err)
	}
}

// maxMessagePair returns a connection from a worker whose MaxMessage is the largest (c1) to one
// whose MaxMessage is max (w2, its end c2).
func maxMessagePair(t *testing.T, ctx context.Context, max int) (c1, c2 *Conn, w2 *Worker) {
	t.Helper()
	needUCX(t)
	w1, err := New(Options{MaxMessage: maxMessage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w1.Close() })
	if w2, err = New(Options{MaxMessage: max}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w2.Close() })
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if c1, err = w1.Connect(ctx, l.Addr()); err != nil {
		t.Fatal(err)
	}
	if c2, err = l.Accept(ctx); err != nil {
		t.Fatal(err)
	}
	return c1, c2, w2
}
