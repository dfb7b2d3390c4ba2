package ipcpool

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Processes killed with SIGKILL at the midpoints of their work, real child processes each
// stopped there (childPauseEnv) and killed: the owner loses no memory for good, and lends none
// while the process may still use it.

// startPaused starts a child that stops at point (childPauseEnv) as it attaches.
func startPaused(t *testing.T, path, point string) *child {
	t.Helper()
	c := spawn(t, exec.Command(os.Args[0], "-test.run=^$"),
		append(os.Environ(), childEnv+"="+path, childQuietEnv+"=1", childPauseEnv+"="+point))
	if line := c.read(t); line != "PAUSED" {
		t.Fatalf("child stopped at %s: %q", point, line)
	}
	return c
}

// killChild kills child k with SIGKILL and waits for it.
func killChild(t *testing.T, k *child) {
	t.Helper()
	must(t, "kill", k.cmd.Process.Signal(syscall.SIGKILL))
	_ = k.cmd.Wait()
	k.dead = true
}

// A process killed in its handshake, the pool mapped, before its ready: its slot is free again
// (the only one of the pool's two), and the grants held are the owner's only.
func TestKilledMidHandshake(t *testing.T) {
	w, path := serveTest(t, Options{Slots: 2})
	k := startPaused(t, path, "ready")
	if n := w.Attached(); n != 1 {
		t.Fatalf("%d processes hold a slot with the child stopped before its ready, want 1", n)
	}
	killChild(t, k)
	waitFor(t, func() bool { return w.Attached() == 0 })
	p := attachTest(t, path, AttachOptions{})
	if p.Slot() != 1 {
		t.Fatalf("attached to slot %d after the killed handshake, want 1", p.Slot())
	}
	b, err := p.Alloc(5000)
	must(t, "Alloc", err)
	must(t, "Free", p.Free(b))
	if held, own := w.SharedStats().Pool.Held, w.src.grantsHeld()+p.src.grantsHeld(); held != own {
		t.Fatalf("%d grants held, the processes hold %d", held, own)
	}
}

// A process killed in a FreeHandle or a Release of the owner's buffer, its reference (the
// buffer's last: the allocation's, or its retain bit) let go, the entry not retired: no
// retirer is left, and the buffer comes back to the owner all the same (its scan), its handle
// stale from then on, the owner's pool empty.
func TestKilledMidFree(t *testing.T) {
	for _, what := range []string{"FreeHandle", "Release"} {
		t.Run(what, func(t *testing.T) {
			w, path := serveTest(t, Options{})
			b, err := w.Alloc(5000)
			must(t, "Alloc", err)
			fill(b, 9)
			h, err := w.Handle(b)
			must(t, "Handle", err)
			k := startChild(t, path, childQuietEnv+"=1", childPauseEnv+"=free")
			if what == "FreeHandle" {
				if got := k.do(t, "F %s", fmtHandle(h)); got != "PAUSED" {
					t.Fatalf("FreeHandle: %s", got)
				}
			} else {
				// The child's retain is the buffer's last reference once the owner frees it.
				if got := k.do(t, "R %s", fmtHandle(h)); got != "OK" {
					t.Fatalf("Retain: %s", got)
				}
				must(t, "Free", w.Free(b))
				if got := k.do(t, "L %s", fmtHandle(h)); got != "PAUSED" {
					t.Fatalf("Release: %s", got)
				}
			}
			killChild(t, k)
			// The handle goes stale (the retire) before the owner's giveBack counts the buffer
			// taken back: wait for both, then say which did not come.
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
				_, err := w.Bytes(h)
				if errors.Is(err, ErrStaleHandle) && w.SharedStats().RetiredIn >= 1 && w.Pool.Stats().Live == 0 {
					break
				}
			}
			if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
				t.Fatalf("the killed free's handle: %v; want ErrStaleHandle", err)
			}
			if got := w.SharedStats().RetiredIn; got < 1 {
				t.Fatalf("%d buffers taken back by the owner, want the killed free's", got)
			}
			if live := w.Pool.Stats().Live; live != 0 {
				t.Fatalf("%d bytes live in the owner's pool after the killed free", live)
			}
			waitFor(t, func() bool { return w.Attached() == 0 })
		})
	}
}

// A process of an owner that died, killed in its rejoin of the new owner (it handed the pool
// over, and sent its claims, the answer not read): once it has exited, the grants it held
// come back to the new owner, and its buffer is let go; none stays held for good.
func TestKilledMidRejoin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	k := startChild(t, path, childQuietEnv+"=1", childPauseEnv+"=claims")
	h := k.alloc(t, 5000, 1)
	if got := k.do(t, "N"); got == "G 0" {
		t.Fatal("the child holds no grant")
	}
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	w, err := Serve(path, Options{Size: 16 << 20, Adopt: 5 * time.Second,
		Timeout: 300 * time.Millisecond, FallbackPageable: true})
	must(t, "Serve adopting", err)
	defer w.Close()
	if line := k.read(t); line != "PAUSED" {
		t.Fatalf("the child in its rejoin: %q", line)
	}
	killChild(t, k)
	<-w.scanned
	waitFor(t, func() bool {
		ps := w.SharedStats().Pool
		return ps.Held == w.src.grantsHeld() && ps.Limbo == 0 && ps.Fenced == 0 && ps.Orphaned == 0
	})
	if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("the killed process's buffer: %v, want it let go", err)
	}
	b, err := w.Alloc(15 << 20) // every grant but the owner's own first
	must(t, "Alloc of the pool's rest", err)
	must(t, "Free", w.Free(b))
}
