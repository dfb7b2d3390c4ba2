package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestWindowlessVersionRefused: a peer of protocol version 1, which kept up to its MaxInFlight
// puts and gets by message in flight on a connection (no dataWindow), is refused at the
// handshake with ErrProtocol naming both versions, where it was accepted and then failed
// mid-transfer (ErrProtocol) once more than maxQueuedAnswers of its answers waited.
func TestWindowlessVersionRefused(t *testing.T) {
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w1, w2 := newWorker(t), newWorker(t)
	l, err := w2.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	helloVersion = 1
	defer func() { helloVersion = protoVersion }()
	c, err := w1.Connect(ctx, l.Addr())
	want := fmt.Sprintf("version %d of the protocol, this worker 1", protoVersion)
	if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), want) {
		if c != nil {
			_ = c.Close()
		}
		t.Fatalf("Connect of a peer of version 1 (no data window): %v; want ErrProtocol, %q", err, want)
	}
}
