package ipcpool

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A process whose owner died closes while no owner runs: its Close unmaps the pool and waits
// to tell the next owner. When one adopts the pool, the process rejoins it and detaches; the
// rejoin reads nothing of the pool it unmapped. (The rejoin's reconcile of the grants read the
// control region after the Close had unmapped it: a fault.)
func TestRejoinAsProcessCloses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	k, err := Keep(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Keep", err)
	defer k.Close()
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true, Timeout: 5 * time.Second})
	must(t, "Attach", err)
	b, err := p.Alloc(5000)
	must(t, "Alloc", err)
	must(t, "Free", p.Free(b))
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	waitFor(t, func() bool { // unmapped: the Close waits for an owner to detach from
		p.sp.fdsMu.Lock()
		defer p.sp.fdsMu.Unlock()
		return p.sp.fds == nil
	})
	startOwnerChild(t, path, 16<<20, ownerAdoptEnv+"=1")
	must(t, "Close across the restart", <-closed)
	waitFor(t, func() bool { return k.Rejoined() == 1 })
}
