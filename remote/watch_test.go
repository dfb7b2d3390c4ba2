package remote

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// lockedLog is a log's text, written by the worker's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWatcherEndsQuietly: with SharedMemory, a peer process of this host is watched through a
// pidfd; the watch of a connection that ends (closed here, its peer alive) stops without a word,
// where it logged that the peer's death would not be seen (the closed pidfd's read fails with
// the poller's "use of closed file", not os.ErrClosed), and its goroutine has ended when the
// worker's Close returns.
func TestWatcherEndsQuietly(t *testing.T) {
	needUCX(t)
	t.Setenv("UCX_TLS", "sm")
	var log lockedLog
	w1, err := New(Options{SharedMemory: true, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := New(Options{SharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	addr, err := w2.Address()
	if err != nil {
		t.Fatal(err)
	}
	c, err := w1.Dial(t.Context(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Accept(t.Context()); err != nil {
		t.Fatal(err)
	}
	w1.mu.Lock()
	watched := c.watcher != nil
	w1.mu.Unlock()
	if !watched {
		t.Fatal("the peer (this process) is not watched")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	if s := log.String(); strings.Contains(s, "cannot watch") {
		t.Fatalf("the watch of a connection that was closed logged:\n%s", s)
	}
}
