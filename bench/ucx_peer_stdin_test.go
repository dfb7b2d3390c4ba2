package main

import (
	"bufio"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/remote"
)

// TestUCXPeerEndsWithItsStdin: the peer ends when its stdin ends (the bench closed it, or
// died: the kernel closes the pipe), without a "quit". It waited for a quit alone: a bench
// killed or lost left its peer running for good, its pool's memory locked.
func TestUCXPeerEndsWithItsStdin(t *testing.T) {
	if w, err := remote.New(remote.Options{Name: "bench-test-probe"}); err != nil {
		t.Skipf("no UCX: %v", err)
	} else {
		_ = w.Close()
	}
	cmd := mainCmd([]string{ucxPeerEnv + "=1"}, "-ucx")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(out).ReadString('\n')
		if !strings.HasPrefix(line, "L ") {
			t.Errorf("the peer printed %q, %v; want its address", line, err)
		}
		_ = in.Close()
		ended <- cmd.Wait()
	}()
	select {
	case err := <-ended:
		if err != nil {
			t.Errorf("the peer ended with %v, want status 0", err)
		}
	case <-time.After(20 * time.Second): // a watchdog, not a synchronization
		_ = cmd.Process.Kill()
		<-ended
		t.Fatal("the peer still ran 20 s after its stdin ended")
	}
}
