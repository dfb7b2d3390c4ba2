package shared

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A process killed while attached leaves nothing that blocks the next one: its slot (the only
// one free) is taken again, its rings are used as they are, its handles are stale.
func TestKilledSlotReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{FallbackPageable: true, Size: 8 << 20, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for round := 0; round < 3; round++ {
		k := startChild(t, path)
		if k.slot != 1 {
			t.Fatalf("round %d: child in slot %d, want 1", round, k.slot)
		}
		line := k.do(t, "A 100 7")
		h, err := parseHandle(strings.Fields(line)[1:])
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		b, err := w.Bytes(h)
		if err != nil {
			t.Fatal(err)
		}
		if err := verify(b, 7); err != nil {
			t.Fatal(err)
		}
		ob, _ := w.Alloc(100) // the owner's buffer, freed by the child: an entry in its ring
		oh, _ := w.Handle(ob)
		if got := k.do(t, "F %s", fmtHandle(oh)); got != "OK" {
			t.Fatal(got)
		}
		_ = k.cmd.Process.Signal(syscall.SIGKILL)
		_ = k.cmd.Wait()
		k.dead = true
		waitFor(t, func() bool { return w.Attached() == 0 })
		if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
			t.Fatalf("round %d: handle of the killed process: %v", round, err)
		}
		waitFor(t, func() bool { w.Collect(); return w.Stats().Heap.Live == 0 })
	}
}

// A free into a full ring waits for the owner to take entries in, and then goes through.
func TestRingFullWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{FallbackPageable: true, Size: 8 << 20, RingSize: 2, DrainInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	p, err := Attach(path, AttachOptions{FallbackPageable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Detach()
	var hs []Handle
	for i := 0; i < 3; i++ {
		b, _ := w.Alloc(64)
		h, _ := w.Handle(b)
		hs = append(hs, h)
	}
	var wg sync.WaitGroup
	done := make(chan error, 3)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, h := range hs {
			done <- p.FreeHandle(h)
		}
	}()
	for i := 0; i < 2; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("a free into a full ring returned at once: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	w.Collect()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	w.Collect()
	if st := w.Stats(); st.Heap.Live != 0 || st.RemoteFreesIn != 3 {
		t.Fatalf("owner: %d live, %d remote frees in; want 0 and 3", st.Heap.Live, st.RemoteFreesIn)
	}
}

// A peer whose user id (SO_PEERCRED) is not allowed is refused before it is given anything.
func TestPeerRefused(t *testing.T) {
	w, path := serveTest(t, Options{FallbackPageable: true})
	w.mu.Lock()
	w.allow = map[int]bool{} // not even the owner's user: this process's peer is refused
	w.mu.Unlock()
	if _, err := Attach(path, AttachOptions{FallbackPageable: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("Attach by a refused user: %v", err)
	}
	if n := w.Attached(); n != 0 {
		t.Fatalf("%d attached after a refusal", n)
	}
}

// A process that closes its socket without detaching keeps its memory until it exits: it
// still has the pool mapped and may write it.
func TestSocketClosedMemoryKeptUntilExit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{FallbackPageable: true, Size: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	k := startChild(t, path)
	line := k.do(t, "A 100 9")
	h, err := parseHandle(strings.Fields(line)[1:])
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if got := k.do(t, "X"); got != "OK" {
		t.Fatal(got)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := w.Bytes(h); err != nil {
		t.Fatalf("the memory of a live process was taken back when its socket closed: %v", err)
	}
	_ = k.cmd.Process.Signal(syscall.SIGKILL)
	_ = k.cmd.Wait()
	k.dead = true
	waitFor(t, func() bool { return w.Attached() == 0 })
	if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("after the process exited: %v", err)
	}
}
