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

// A grant the process gives back on its new owner's connection as it rejoins is given back
// once: the rejoin's reconcile, reading the grant words before the owner took that release
// in, does not give it back again. (It did: the owner, finding a release of a grant the
// process no longer held, cut the process off.)
func TestRejoinReconcileRacingRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 16<<20)
	k, err := Keep(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Keep", err)
	defer k.Close()
	o := AttachOptions{FallbackPageable: true}
	o.Pool.PurgeDelay = time.Hour // its empty grant goes back at the Trim below only
	p, err := Attach(context.Background(), path, o)
	must(t, "Attach", err)
	defer p.Close()
	b, err := p.Alloc(5000)
	must(t, "Alloc", err)
	must(t, "Free", p.Free(b)) // its grant is empty, still the process's
	if p.src.grantsHeld() == 0 {
		t.Fatal("the process holds no grant")
	}
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	served := make(chan *Owner, 1)
	p.cl.mu.Lock()
	p.cl.pauseRejoin = func() {
		p.cl.pauseRejoin = nil
		// The owner takes the release in only after the reconcile has read the grant words.
		w := <-served
		w.mu.Lock()
		must(t, "Trim", p.Pool.Trim())
		time.AfterFunc(50*time.Millisecond, w.mu.Unlock)
	}
	p.cl.mu.Unlock()
	w, err := Serve(path, Options{Size: 4 << 20, Adopt: 5 * time.Second, FallbackPageable: true})
	must(t, "Serve adopting", err)
	defer w.Close()
	served <- w
	waitFor(t, func() bool { return p.Rejoined() == 1 && k.Rejoined() == 1 })
	time.Sleep(100 * time.Millisecond) // the release, and any second one, taken in
	x, err := p.Alloc(3 << 20)
	must(t, "Alloc from the new owner", err)
	must(t, "Free", p.Free(x))
	must(t, "Close", p.Close())
	must(t, "keeper Close", k.Close())
	must(t, "owner Close", w.Close())
}
