package ipcpool

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// A buffer of several grants that others retain outlives its holder's death whole: every
// grant under it stays the retained buffer's (orphaned) until the last retain goes, none is
// lent again meanwhile. (Only the buffer's first grant was kept when it spanned two: the
// holder's entry was let go at its death and the grants came back under the owner's retain.)
func TestDeadHoldersWideBufferKeepsItsGrants(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool.sock")
	w, err := Serve(path, Options{Size: 16 << 20, GrantSize: 2 << 20, FallbackPageable: true})
	must(t, "Serve", err)
	defer w.Close()
	k := startChild(t, path, childQuietEnv+"=1")
	h := k.alloc(t, 3<<20, 5) // two grants at least
	must(t, "Retain", w.Retain(h))
	b, err := w.Bytes(h)
	must(t, "Bytes", err)
	must(t, "kill", k.cmd.Process.Signal(syscall.SIGKILL))
	_ = k.cmd.Wait()
	k.dead = true
	waitFor(t, func() bool { ps := w.SharedStats().Pool; return w.Attached() == 0 && ps.Limbo == 0 && ps.Fenced == 0 })
	if ps := w.SharedStats().Pool; ps.Orphaned < 2 {
		t.Errorf("a retained buffer of 3 MiB of a dead process keeps %d grants, want 2 or more: %+v", ps.Orphaned, ps)
	}
	// Everything else of the pool is lent and written over: none of it is the retained buffer.
	var mine [][]byte
	for {
		x, err := w.Alloc(1<<21 - 4096)
		if errors.Is(err, pinmalloc.ErrOutOfMemory) {
			break
		}
		must(t, "Alloc", err)
		fill(x, 77)
		mine = append(mine, x)
	}
	if err := verify(b, 5); err != nil {
		t.Fatalf("the retained buffer of a dead process was lent again: %v", err)
	}
	if _, err := w.Bytes(h); err != nil {
		t.Fatalf("Bytes of a retained buffer of a dead process: %v", err)
	}
	for _, x := range mine {
		must(t, "Free", w.Free(x))
	}
	must(t, "Release", w.Release(h))
	waitFor(t, func() bool { return w.SharedStats().Pool.Orphaned == 0 })
}
