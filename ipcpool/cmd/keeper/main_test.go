package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/ipcpool"
)

// The keeper attaches to a pool, holds it while it runs, and leaves when told to.
func TestKeeper(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := ipcpool.Serve(path, ipcpool.Options{Size: 4 << 20, FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, path, 5*time.Second, out) }()
	for end := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "holding pool"); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the keeper did not attach")
		}
	}
	if w.Attached() != 1 {
		t.Fatalf("%d attached with the keeper holding the pool", w.Attached())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w.Attached() != 0 || !strings.Contains(out.String(), "holding pool") {
		t.Fatalf("after the keeper left: %d attached; it said %q", w.Attached(), out.String())
	}
}

// syncBuffer is a bytes.Buffer that the keeper writes and the test reads at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
