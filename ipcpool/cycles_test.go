package ipcpool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// 200 processes attach and leave one after another (every fifth killed with SIGKILL), each
// sharing a buffer with the owner: no slot, descriptor, mapping or goroutine is left behind,
// and every leaver's memory is back.
func TestAttachDetachCycles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 8 << 20, GrantSize: 2 << 20, Slots: 3, FallbackPageable: true})
	must(t, "Serve", err)
	defer w.Close()
	fds, maps, gs := openFds(t), mappings(t), runtime.NumGoroutine()
	cycles := 20
	if long() {
		cycles = 200
	}
	for i := range cycles {
		k := startChild(t, path, childQuietEnv+"=1")
		h := k.alloc(t, 1000+i, uint64(i))
		b, err := w.Bytes(h)
		must(t, "Bytes", err)
		must(t, "verify", verify(b, uint64(i)))
		if i%5 == 4 {
			must(t, "kill", k.cmd.Process.Signal(syscall.SIGKILL))
			_ = k.cmd.Wait()
			k.dead = true
		} else {
			if got := k.do(t, "F %s", fmtHandle(h)); got != "OK" {
				t.Fatal(got)
			}
			k.quit(t)
		}
		waitFor(t, func() bool { return w.Attached() == 0 })
		if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
			t.Fatalf("cycle %d: the handle of a process gone: %v", i, err)
		}
	}
	waitFor(t, func() bool {
		ps := w.SharedStats().Pool
		return ps.Held == w.src.grantsHeld() && ps.Limbo == 0 && ps.Fenced == 0
	})
	// In process: the in-process attaches' descriptors, mappings and goroutines, counted after
	// a few cycles (the runtime's own mappings settle).
	for i := range cycles + 5 {
		if i == 5 {
			fds, maps, gs = openFds(t), mappings(t), runtime.NumGoroutine()
		}
		p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
		must(t, "Attach", err)
		x, err := p.Alloc(100 + i)
		must(t, "Alloc", err)
		must(t, "Free", p.Free(x))
		must(t, "Close", p.Close())
	}
	waitFor(t, func() bool { return openFds(t) <= fds && runtime.NumGoroutine() <= gs+2 })
	// The pool's own mappings (its memfds) are exactly as before; all mappings together may
	// differ by the runtime's own (its heap grows, or the kernel splits or merges its areas:
	// CI met 64 -> 69), but not by one a cycle.
	if m := mappings(t); m.pool != maps.pool || m.all > maps.all+cycles/2 {
		t.Fatalf("%+v mappings after %d cycles, %+v before", m, cycles, maps)
	}
}

// mapCount is a count of this process's memory mappings: all of them, and the pool's memfds'.
type mapCount struct{ all, pool int }

// mappings counts this process's memory mappings.
func mappings(t *testing.T) mapCount {
	b, err := os.ReadFile("/proc/self/maps")
	must(t, "maps", err)
	var n mapCount
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" {
			continue
		}
		n.all++
		if strings.Contains(l, "memfd:pinmalloc-ipcpool") {
			n.pool++
		}
	}
	return n
}

// A process that closes its socket and lives on keeps its grants until it exits (it may still
// write them), though its handles go stale at once; its slot is kept with them (the slot's
// line is what an owner that adopts the pool finds them by), and free once it has exited.
func TestSocketClosedMemoryKeptUntilExit(t *testing.T) {
	w, path := serveTwoSlots(t)
	k := startChild(t, path, childQuietEnv+"=1")
	h := k.alloc(t, 100, 9)
	if got := k.do(t, "X"); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	w.waitRounds(3) // the watcher's rounds
	if ps := w.SharedStats().Pool; ps.Limbo != 1 {
		t.Fatalf("the grant of a live process that closed its socket: %+v, want it in limbo", ps)
	}
	if _, err := w.Bytes(h); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("a handle of a process cut off: %v", err)
	}
	// Slots 2: the owner's, and the one kept.
	if _, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true}); !errors.Is(err, ErrRefused) {
		t.Fatalf("an attach while the only slot is kept for a process alive: %v", err)
	}
	k.kill()
	waitFor(t, func() bool { return w.SharedStats().Pool.Limbo == 0 })
	p, err := Attach(context.Background(), path, AttachOptions{FallbackPageable: true})
	must(t, "Attach once the process kept has exited", err)
	must(t, "Close", p.Close())
}

// A process that closes its socket and lives on keeps its retains until it exits, as its
// grants: the buffer it retains is not let go (freed, and lent again, while it may still read
// and write it) until it is killed. Its retain bits were cleared at once before.
func TestSocketClosedRetainKeptUntilExit(t *testing.T) {
	w, path := serveTwoSlots(t)
	b, err := w.Alloc(4096)
	must(t, "Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	k := startChild(t, path, childQuietEnv+"=1")
	if got := k.do(t, "R %s", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	if got := k.do(t, "X"); got != "OK" { // close the socket, stay alive
		t.Fatal(got)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	w.waitRounds(3) // the watcher's rounds
	must(t, "Free", w.Free(b))
	if _, err := w.Bytes(h); err != nil {
		t.Fatalf("a buffer a live process retains, let go when it closed its socket: %v", err)
	}
	k.kill()
	waitFor(t, func() bool { _, err := w.Bytes(h); return errors.Is(err, ErrStaleHandle) })
}

// The owner closes while a process gone from its socket alive still keeps its retains (and
// its slot): it is not attached, so Close goes on, and returns; the buffer it retains is given
// up with the pool.
func TestSocketClosedRetainOwnerClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 8 << 20, GrantSize: 2 << 20, Slots: 2, FallbackPageable: true})
	must(t, "Serve", err)
	b, err := w.Alloc(4096)
	must(t, "Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	k := startChild(t, path, childQuietEnv+"=1")
	defer k.kill()
	if got := k.do(t, "R %s", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	if got := k.do(t, "X"); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	must(t, "Free", w.Free(b))
	done := make(chan error, 1)
	go func() { done <- w.Close() }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, pinned.ErrLiveBlocks) {
			t.Fatalf("Close with a slot kept for a live process's retains: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close with a slot kept for a live process's retains: it hangs")
	}
}
