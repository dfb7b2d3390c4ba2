package main

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/remote"
)

// TestUCXOpenPeerHangs: a peer that hangs before it prints its address fails the suite's
// setup at its ctx's end (-ucx-step-limit, in ucxBench), and close then ends what the setup
// made: the peer killed at once (it could not be told to quit), the pool closed. The setup read
// the address with no bound (the run hung before its first step, whatever the limit), and on a
// failure returned nothing to close: the workers, the pool and a started peer were left.
func TestUCXOpenPeerHangs(t *testing.T) {
	if w, err := remote.New(remote.Options{Name: "bench-test-probe"}); err != nil {
		t.Skipf("no UCX: %v", err)
	} else {
		_ = w.Close()
	}
	b := &ucxBenchState{rounds: 1, filter: regexp.MustCompile(""),
		peerCmd: func() (*exec.Cmd, error) { return exec.Command("sh", "-c", "exec sleep 60"), nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := b.open(ctx)
		b.close()
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("open with a hung peer: %v, want its ctx's deadline", err)
		}
	case <-time.After(10 * time.Second): // a watchdog, not a synchronization
		if b.peer != nil && b.peer.Process != nil {
			_ = b.peer.Process.Kill()
		}
		t.Fatal("open and close with a hung peer took more than 10 s (its ctx: 200ms)")
	}
	if b.peer == nil || b.peer.ProcessState == nil {
		t.Errorf("the hung peer was left running")
	}
	if b.pool == nil {
		t.Fatal("open made no pool")
	}
	if err := b.pool.Close(); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("the pool after close: Close = %v, want ErrClosed (closed already)", err)
	}
}
