package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// A memfd pool's process whose Close could not make a kept region inaccessible (the mprotect
// refused) still reaches that memory through a stale slice: it must keep its grants, as a
// kept VMM mapping does, so that the owner lends them to nobody until it exits. (The grants
// went back all the same, and the owner could lend memory a stale write here would reach.)
func TestFakeExposedRegionLendsNothing(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	watchSelf = true // the process is this one: watched as another, it never exits here
	t.Cleanup(func() { watchSelf = false })
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 4 << 20, Pool: cudaHost})
	must(t, "Serve", err)
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	b, err := p.Alloc(4096)
	must(t, "Alloc", err)
	must(t, "Free", p.Free(b)) // b kept: a stale slice
	held := p.src.grantsHeld()
	f.FailAfter(fakecuda.CallUnregister, 0, fakecuda.ResultInvalidValue)
	p.sp.mprotect = func([]byte, int) error { return unix.ENOMEM }
	err = p.Close()
	if !errors.Is(err, pcuda.ErrInvalidValue) || !errors.Is(err, unix.ENOMEM) {
		t.Fatalf("Close with the unregistration and the mprotect refused: %v", err)
	}
	p.sp.mprotect = nil
	b[0]++ // still the pool's memory
	if ps := w.SharedStats().Pool; ps.Limbo != held || ps.Held != w.src.grantsHeld() {
		t.Fatalf("after a leave that left the pool reachable: %+v; want the process's %d grants "+
			"kept (limbo)", ps, held)
	}
	must(t, "the Close that retries", p.Close())
	must(t, "owner Close", w.Close())
}
