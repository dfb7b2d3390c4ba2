package ipcpool

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A stopped owner (SIGSTOP) hangs no one: Attach and a grant request end at their deadline
// with an error matching context.DeadlineExceeded, and a free by handle never waits for it.
func TestStoppedOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w := startOwnerChild(t, path, 8<<20)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true, Timeout: 100 * time.Millisecond})
	must(t, "Attach", err)
	line := w.do(t, "A 100 5")
	h, err := parseHandle(strings.Fields(line)[1:])
	must(t, "parse "+line, err)
	must(t, "SIGSTOP", w.cmd.Process.Signal(syscall.SIGSTOP))
	defer w.cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, func() bool { return procState(w.cmd.Process.Pid) == 'T' })

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	_, err = Attach(ctx, path, AttachOptions{FallbackPageable: true})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Attach to a stopped owner: %v after %v, want context.DeadlineExceeded", err, time.Since(start))
	}
	// The Alloc waits for one answer, not one per retry of its pool (which retries an
	// allocation refused for want of memory: 9 waits of 125 ms, 2.3 s, before it left
	// deadlines alone).
	start = time.Now()
	if _, err := p.Alloc(1 << 20); !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Fatalf("an Alloc that needs a grant of a stopped owner: %v after %v", err, time.Since(start))
	}
	t.Logf("an Alloc that needs a grant of a stopped owner: %v", time.Since(start))
	start = time.Now()
	must(t, "FreeHandle", p.FreeHandle(h))
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("a free by handle waited %v for a stopped owner", d)
	}
	must(t, "SIGCONT", w.cmd.Process.Signal(syscall.SIGCONT))
	b, err := p.Alloc(1 << 20)
	must(t, "Alloc once the owner runs again", err)
	must(t, "Free", p.Free(b))
	must(t, "Close", p.Close())
}

// procState returns the state letter of process pid (/proc/pid/stat), or 0.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
