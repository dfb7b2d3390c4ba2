package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"testing"
	"time"
)

// TestStartPeerBounded: a peer that never prints its address (hung before it listens) fails
// startPeer at its ctx's end, and is killed and waited for, not left behind; a peer that
// prints something else fails it at once, likewise ended; one that prints "L <hex>" gives its
// address and runs on. startPeer read the address line with no bound: such a peer hung -ucx
// before its first step, whatever -ucx-step-limit said, and a peer that failed it was left
// running.
func TestStartPeerBounded(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	type started struct {
		addr []byte
		err  error
	}
	start := func(ctx context.Context, cmd *exec.Cmd) started {
		done := make(chan started, 1)
		go func() {
			addr, err := startPeer(ctx, cmd)
			done <- started{addr, err}
		}()
		select {
		case s := <-done:
			return s
		case <-time.After(10 * time.Second): // a watchdog, not a synchronization
			_ = cmd.Process.Kill()
			t.Fatalf("startPeer of %q hung past its ctx's end", cmd.Args)
			return started{}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	hung := exec.Command("sh", "-c", "exec sleep 60")
	if s := start(ctx, hung); !errors.Is(s.err, context.DeadlineExceeded) {
		t.Errorf("a peer that prints nothing: %v, want its ctx's deadline", s.err)
	}
	if hung.ProcessState == nil {
		t.Errorf("the hung peer was not ended and waited for")
	}

	bad := exec.Command("sh", "-c", "echo nonsense; exec sleep 60")
	if s := start(context.Background(), bad); s.err == nil || bad.ProcessState == nil {
		t.Errorf("a peer that prints nonsense: %v, ended %v; want an error, ended",
			s.err, bad.ProcessState != nil)
	}

	good := exec.Command("sh", "-c", "echo L 0a0b; exec sleep 60")
	s := start(context.Background(), good)
	if s.err != nil || !bytes.Equal(s.addr, []byte{0x0a, 0x0b}) || good.ProcessState != nil {
		t.Errorf("a good peer: %x, %v, ended %v; want 0a0b, running", s.addr, s.err,
			good.ProcessState != nil)
	}
	if good.Process != nil {
		_ = good.Process.Kill()
		_ = good.Wait()
	}
}
