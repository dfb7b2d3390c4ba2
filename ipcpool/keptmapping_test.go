package ipcpool

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// A VMM pool's process whose unmap the driver refuses as it leaves keeps the pool mapped, and
// writable, where its buffers given up still point: the owner must not lend its grants to
// another process while it does. Its grants stay its own (limbo) until it exits, as those of a
// process gone alive; the process is not attached once Close returns. (They were given back
// as its pool closed, and its detach said it mapped nothing any more: the owner lent them
// again while a use of a given-up buffer still wrote them.)
func TestFakeVMMKeptMappingLendsNothing(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	watchSelf = true // the process is this one: watched as another, it never exits here
	t.Cleanup(func() { watchSelf = false })
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 4 << 20, VMM: true, Pool: cudaHost})
	must(t, "Serve", err)
	p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
	must(t, "Attach", err)
	b, err := p.Alloc(4096) // given up at Close
	must(t, "Alloc", err)
	held := p.src.grantsHeld()
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	if err := p.Close(); !errors.Is(err, pcuda.ErrInvalidValue) {
		t.Fatalf("Close with the unmap refused: %v", err)
	}
	if w.Attached() != 0 {
		t.Fatal("the process still counts as attached after its Close returned")
	}
	b[0]++ // the driver's mapping, kept: still the pool's memory
	if ps := w.SharedStats().Pool; ps.Limbo != held || ps.Held != w.src.grantsHeld() {
		t.Fatalf("after a leave that kept the pool mapped: %+v; want the process's %d grants kept (limbo)", ps, held)
	}
	must(t, "the Close that retries", p.Close())
	must(t, "owner Close", w.Close())
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 {
		t.Fatalf("%d handles, %d reservations left", st.Handles, st.Reservations)
	}
}
