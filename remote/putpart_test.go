package remote

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestOversizePutRefused: a put by message is one data message of at most putPart bytes (a
// larger put goes in parts), and a target refuses a longer one as UCX's callback delivers it,
// neither keeping nor copying its bytes, and fails its connection with ErrProtocol: each put
// was one message of any length, which the target kept whole (as many as maxQueuedAnswers a
// connection) until its bytes were placed. A put of many parts from an honest sender lands
// whole.
func TestOversizePutRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w1, w2, r1, r2, c1, c2 := connectedPair(t, ctx)
	const n = 4 << 20
	b1, b2, d := putBuffers(t, r1, r2, n)
	for i := range b1 {
		b1[i] = byte(i*7 + i>>12)
	}
	if err := c1.Put(ctx, b1, d); err != nil {
		t.Fatalf("a put of %d bytes, in parts: %v", n, err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("a put of %d bytes, in parts: the target's buffer differs", n)
	}
	clear(b2)
	w1.mu.Lock()
	w1.putPart = n // a sender that does not split its puts
	w1.mu.Unlock()
	err := c1.Put(ctx, b1, d)
	if err == nil {
		t.Fatalf("a put by one message of %d bytes was taken", n)
	}
	if !bytes.Equal(b2, make([]byte, n)) {
		t.Fatal("the refused put's bytes were placed")
	}
	select {
	case <-c2.dead:
	case <-ctx.Done():
		t.Fatalf("the target's connection is still open after a put by one message of %d bytes", n)
	}
	if err := c2.Err(); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "data message of") {
		t.Fatalf("the target's connection ended with %v; want ErrProtocol, a data message beyond its bound", err)
	}
	t.Logf("sender: %v; target: %v", err, c2.Err())
	if got := w2.Stats().MessagesDropped; got != 0 {
		t.Logf("messages dropped: %d", got)
	}
}
