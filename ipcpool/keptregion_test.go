package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// A memfd pool's process that leaves with no live buffer, its region's unregistration refused,
// keeps the region registered but inaccessible: its grants go back to the owner, who lends
// them to other processes, so a late use of a buffer freed before the Close (a slice the
// caller kept) must fault rather than write another process's buffer. (The region stayed
// mapped read-write, the pool's memory, where buffers were not given up at the Close: only a
// Close that gave up live buffers made the kept region inaccessible.)
func TestFakeKeptRegionFaultsWithNoLiveBuffer(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 4 << 20, Pool: cudaHost})
	must(t, "Serve", err)
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	must(t, "Free", p.Free(b)) // b kept: a stale slice
	f.FailAfter(fakecuda.CallUnregister, 0, fakecuda.ResultInvalidValue)
	if err := p.Close(); !errors.Is(err, pcuda.ErrInvalidValue) {
		t.Fatalf("Close with the unregistration refused: %v", err)
	}
	if n := f.Stat(fakecuda.Registrations); n != 2 {
		t.Fatalf("%d registrations after the refused Close, want 2 (the refused one kept)", n)
	}
	if ps := w.SharedStats().Pool; ps.Limbo != 0 || ps.Held != w.src.grantsHeld() {
		t.Fatalf("after a leave that kept a region registered: %+v; want every grant back", ps)
	}
	if !faults(b) {
		t.Error("a stale buffer in the kept region still reaches the pool's memory, " +
			"which the owner lends again")
	}
	must(t, "the Close that retries", p.Close())
	if n := f.Stat(fakecuda.Registrations); n != 1 {
		t.Fatalf("%d registrations after the retry, want the owner's alone", n)
	}
	if !faults(b) {
		t.Error("a stale buffer reaches memory after the retry unmapped the pool")
	}
	must(t, "owner Close", w.Close())
}
