package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/ucx"
)

// TestFloodDropFailsConn: a message that UCX's callback dropped because more came in one
// progress round than the worker queues (internal/ucx's flood tests) is reported by its header;
// the connection it names fails with ErrProtocol, saying why, where it was ignored: the message
// was lost, its sender, whose send had completed, never told, and the receiver's Recv waited
// for it.
func TestFloodDropFailsConn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, w2, _, _, _, c2 := connectedPair(t, ctx)
	w2.mu.Lock()
	w2.handle(&ucx.Event{Kind: ucx.EventMessage, Dropped: true, Data: header(msgData, c2.id, 0), Len: msgHeader + 4096})
	state := c2.state
	w2.mu.Unlock()
	if state != connFailed {
		t.Fatal("a message of the peer's dropped unseen, and its connection is still open")
	}
	if err := c2.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("the connection ended with %v, want ErrProtocol", err)
	}
}
