package ipcpool

import (
	"context"
	"errors"
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

// A grant the process gives back while its rejoin waits for the answer to its claims (which
// name it: it was held when they were sent) is given back to the new owner once the rejoin is
// done, and once: the owner's table and the process agree afterwards, and the process stays
// connected. (Without the release owed, the grant stayed the process's in the owner's table
// for good.)
func TestRejoinReleaseDuringClaims(t *testing.T) {
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
	p.cl.mu.Lock()
	p.cl.pauseRejoin = func() { must(t, "Trim", p.Pool.Trim()) } // the claims sent, no answer yet
	p.cl.mu.Unlock()
	w, err := Serve(path, Options{Size: 4 << 20, Adopt: 5 * time.Second, FallbackPageable: true})
	must(t, "Serve adopting", err)
	defer w.Close()
	waitFor(t, func() bool { return p.Rejoined() == 1 && k.Rejoined() == 1 })
	if p.src.grantsHeld() != 0 {
		t.Fatal("the Trim gave nothing back")
	}
	agree := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.heldBy(p.slot) == 0
	}
	for end := time.Now().Add(time.Second); !agree(); {
		if time.Now().After(end) {
			t.Fatal("the owner still gives the process the grant it gave back during its rejoin")
		}
		time.Sleep(time.Millisecond)
	}
	x, err := p.Alloc(3 << 20)
	must(t, "Alloc from the new owner", err)
	must(t, "Free", p.Free(x))
	if p.Rejoined() != 1 {
		t.Fatalf("the process rejoined %d times: cut off", p.Rejoined())
	}
	must(t, "Close", p.Close())
	must(t, "keeper Close", k.Close())
	must(t, "owner Close", w.Close())
}

// An owner that adopted a pool and closes before its watcher's first round (which scans what
// the previous owner left) ends the Retain waiting for that scan with ErrClosed. (The Retain
// waited for good: the scan never came.)
func TestAdoptedOwnerCloseEndsRetainWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	a := startOwnerChild(t, path, 8<<20)
	h := a.alloc(t, 3000, 1)
	k, err := Keep(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Keep", err)
	must(t, "kill the owner", a.cmd.Process.Signal(syscall.SIGKILL))
	_ = a.cmd.Wait()
	a.dead = true
	// No watcher round: the scan waits for good.
	w, err := Serve(path, Options{Size: 8 << 20, Adopt: 5 * time.Second, DrainInterval: time.Hour, FallbackPageable: true})
	must(t, "Serve adopting", err)
	waitFor(t, func() bool { return k.Rejoined() == 1 })
	must(t, "keeper Close", k.Close())
	retained := make(chan error, 1)
	go func() { retained <- w.Retain(h) }()
	select {
	case err := <-retained:
		t.Fatalf("Retain before the scan: %v", err)
	case <-time.After(20 * time.Millisecond): // waiting for the scan
	}
	must(t, "owner Close", w.Close())
	select {
	case err := <-retained:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the Retain waiting as the owner closed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Retain still waits for the scan after the owner's Close")
	}
}
