package ipcpool

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// An Attach whose own deadline (AttachOptions.Timeout) passes before the owner says its hello
// fails with an error matching context.DeadlineExceeded, not ErrRefused: a handshake that
// took too long is no refusal (ErrRefused's doc). The owner here is a socket that never
// answers. (The error matched ErrRefused too: "refused: reading the pool's hello: i/o
// timeout".)
func TestAttachTimedOutAtTheHelloIsNoRefusal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	must(t, "listen", err)
	defer ln.Close()
	_, err = Attach(context.Background(), path, AttachOptions{Timeout: 100 * time.Millisecond, FallbackPageable: true})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrRefused) {
		t.Fatalf("Attach to an owner that never says its hello: %v; want a timeout, not ErrRefused", err)
	}
}
