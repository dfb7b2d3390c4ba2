package ipcpool

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// serveTwoSlots serves a pool of four 2 MiB grants and two slots, closed at the test's end, and
// returns its owner and its path.
func serveTwoSlots(t *testing.T) (*Owner, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 8 << 20, GrantSize: 2 << 20, Slots: 2, FallbackPageable: true})
	must(t, "Serve", err)
	t.Cleanup(func() { _ = w.Close() })
	return w, path
}

// A process gone from its socket alive, its slot kept for what it holds, goes on using the
// pool until it exits. A retain it takes only then (its slot's line said it held none when it
// left) is let go at its exit as one taken before: the buffer goes back to its holder.
func TestRetainAfterSocketClosedLetGoAtExit(t *testing.T) {
	w, path := serveTwoSlots(t)
	b, err := w.Alloc(4096)
	must(t, "Alloc", err)
	h, err := w.Handle(b)
	must(t, "Handle", err)
	k := startChild(t, path, childQuietEnv+"=1")
	defer k.kill()
	// A grant of its own: its slot is kept when it closes its socket, staying alive.
	k.alloc(t, 3000, 5)
	if got := k.do(t, "X"); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { return w.Attached() == 0 }) // its leave is done
	if got := k.do(t, "R %s", fmtHandle(h)); got != "OK" {
		t.Fatalf("a retain after the process left its socket: %s", got)
	}
	must(t, "Free", w.Free(b))
	if _, err := w.Bytes(h); err != nil {
		t.Fatalf("a buffer a live process retains, let go: %v", err)
	}
	k.kill()
	waitFor(t, func() bool { _, err := w.Bytes(h); return errors.Is(err, ErrStaleHandle) })
}

// A process gone from its socket alive may go on sharing buffers of the grants it keeps. When
// it exits, those are let go as those it shared before it left: one nobody retains goes (its
// handle is stale, never the memory lent to another), one another process retains keeps its
// grants until the last release (a filler that takes every free grant writes none of it).
func TestSharedAfterSocketClosedLetGoAtExit(t *testing.T) {
	w, path := serveTwoSlots(t)
	// One P, one shard: what it allocates after it left comes from the grant it holds.
	k := startChild(t, path, childQuietEnv+"=1", "GOMAXPROCS=1")
	defer k.kill()
	k.alloc(t, 3000, 5) // a grant of its own: its slot is kept when it goes
	if got := k.do(t, "X"); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	retained := k.alloc(t, 3000, 6) // shared after it left
	loose := k.alloc(t, 3000, 7)
	must(t, "Retain", w.Retain(retained))
	k.kill()
	waitFor(t, func() bool { ps := w.SharedStats().Pool; return ps.Limbo == 0 && ps.Fenced == 0 })
	waitFor(t, func() bool { _, err := w.Bytes(loose); return errors.Is(err, ErrStaleHandle) })
	filled := fillPool(t, w.Process)
	bs, err := w.Bytes(retained)
	must(t, "Bytes of the retained buffer", err)
	must(t, "the retained buffer's bytes after a filler", verify(bs, 6))
	for _, x := range filled {
		must(t, "Free", w.Free(x))
	}
	must(t, "Release", w.Release(retained))
	waitFor(t, func() bool { _, err := w.Bytes(retained); return errors.Is(err, ErrStaleHandle) })
	waitFor(t, func() bool { ps := w.SharedStats().Pool; return ps.Orphaned == 0 && ps.Limbo == 0 })
}

// A process gone from its socket alive still holds the buffers it allocated: its pool frees
// none it has not freed. The owner lets go the allocation of its buffer retained (here by
// itself) as it leaves, and the last release of it, its own, frees nothing under it: no later
// allocation of its pool overlaps the buffer, whose bytes stay as it wrote them.
func TestReleaseAfterSocketClosedFreesNoBufferItHolds(t *testing.T) {
	w, path := serveTwoSlots(t)
	// One P, one shard: a block its pool frees is one its next allocations find.
	k := startChild(t, path, childQuietEnv+"=1", "GOMAXPROCS=1")
	defer k.kill()
	h := k.alloc(t, 3000, 5)
	if got := k.do(t, "R %s", fmtHandle(h)); got != "OK" {
		t.Fatal(got)
	}
	if got := k.do(t, "X"); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	if got := k.do(t, "L %s", fmtHandle(h)); got != "OK" {
		t.Fatalf("its release of its own buffer, after it left its socket: %s", got)
	}
	for i := range 64 {
		x := k.alloc(t, 3000, 8)
		if x.Offset < h.Offset+h.Length && h.Offset < x.Offset+x.Length {
			t.Fatalf("allocation %d at [%#x, +%d) overlaps the buffer the process holds at [%#x, +%d)",
				i, x.Offset, x.Length, h.Offset, h.Length)
		}
	}
	if got := k.do(t, "K %s 5", fmtHandle(h)); got != "OK" {
		t.Fatalf("the bytes of the buffer the process holds: %s", got)
	}
}

// A process gone from its socket alive frees the buffers it shared before it left, whose
// allocations the owner let go as it left (eGone): the Free of each succeeds, once (a second is
// refused), and the buffer goes back to its pool once no other process retains it: at
// once for one nobody retains (the owner let its entry go already), at the last release of one
// another retains. (Before, each Free was refused as stale and the buffer stayed in its pool
// until it exited.)
func TestFreeAfterSocketClosed(t *testing.T) {
	w, path := serveTwoSlots(t)
	k := startChild(t, path, childQuietEnv+"=1", "GOMAXPROCS=1")
	defer k.kill()
	loose := k.alloc(t, 3000, 5)
	retained := k.alloc(t, 3000, 6)
	must(t, "Retain", w.Retain(retained))
	if got := k.do(t, "X"); got != "OK" {
		t.Fatal(got)
	}
	waitFor(t, func() bool { return w.Attached() == 0 })
	live := func() int {
		t.Helper()
		var n int
		if _, err := fmt.Sscanf(k.do(t, "V"), "V %d", &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := live()
	if got := k.do(t, "D %s", fmtHandle(loose)); got != "OK" {
		t.Fatalf("the process's Free of its buffer nobody retains, after it left: %s", got)
	}
	if got := k.do(t, "D %s", fmtHandle(loose)); !strings.HasPrefix(got, "E ") {
		t.Fatalf("its second Free of the buffer: %s, want an error (a double free)", got)
	}
	if got := live(); got != n-1 {
		t.Fatalf("%d live buffers after the Free of one of %d", got, n)
	}
	if got := k.do(t, "D %s", fmtHandle(retained)); got != "OK" {
		t.Fatalf("the process's Free of its buffer another retains, after it left: %s", got)
	}
	if got := k.do(t, "D %s", fmtHandle(retained)); got != "E stale" {
		t.Fatalf("its second Free of the buffer another retains: %s, want stale", got)
	}
	if _, err := w.Bytes(retained); err != nil {
		t.Fatalf("a buffer retained, after its holder's Free: %v", err)
	}
	must(t, "Release", w.Release(retained))
	waitFor(t, func() bool { return live() == n-2 })
	if _, err := w.Bytes(retained); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("a buffer let go: Bytes of its handle: %v", err)
	}
}
