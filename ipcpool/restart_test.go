package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

// The owner dies (SIGKILL) and a new one adopts the pool: the same pool (its id), its
// processes rejoined in their slots, a handle made before the restart still valid, a buffer
// of the dead owner that a survivor retains still intact (and one nobody retained stale),
// and the survivor allocating from the new owner.
func TestOwnerRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	k, err := Keep(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Keep", err)
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach", err)
	pb, err := p.Alloc(5000)
	must(t, "Alloc", err)
	fill(pb, 3)
	ph, err := p.Handle(pb)
	must(t, "Handle", err)
	kept, gone := a.alloc(t, 3000, 7), a.alloc(t, 3000, 8)
	must(t, "Retain", p.Retain(kept))
	if got := a.do(t, "C %s 3", fmtHandle(ph)); got != "OK" {
		t.Fatalf("the first owner reads the survivor's buffer: %s", got)
	}
	must(t, "kill", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true

	b := startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
	if b.pool != a.pool {
		t.Fatalf("the new owner serves pool %x, the dead one served %x: it did not adopt", b.pool, a.pool)
	}
	waitFor(t, func() bool { return p.Rejoined() == 1 && k.Rejoined() == 1 })
	if got := b.do(t, "C %s 3", fmtHandle(ph)); got != "OK" {
		t.Fatalf("the new owner reads, by a handle made before the restart: %s", got)
	}
	if got := b.do(t, "C %s 7", fmtHandle(kept)); got != "OK" {
		t.Fatalf("the dead owner's buffer the survivor retains: %s", got)
	}
	if got := b.do(t, "C %s 8", fmtHandle(gone)); got != "E stale" {
		t.Fatalf("the dead owner's buffer nobody retained: %s", got)
	}
	kb, err := p.Bytes(kept)
	must(t, "Bytes", err)
	must(t, "verify", verify(kb, 7))
	x, err := p.Alloc(3 << 20) // more than the survivor holds: a grant of the new owner
	must(t, "Alloc after the restart", err)
	must(t, "Free", p.Free(x))
	must(t, "Release", p.Release(kept))
	if _, err := p.Bytes(kept); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("the dead owner's buffer after its last release: %v", err)
	}
	must(t, "Free", p.Free(pb))
	if got := b.do(t, "C %s 3", fmtHandle(ph)); got != "E stale" {
		t.Fatalf("the survivor's buffer after its free: %s", got)
	}
	must(t, "Close", p.Close())
	must(t, "keeper Close", k.Close())
}
