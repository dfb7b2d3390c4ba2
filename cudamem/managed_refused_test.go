package cudamem_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeManagedPrefetchRefused: a Prefetch asked correctly (managed memory of the provider,
// a device the machine has, the legacy stream) that the driver refuses, here under the
// context's sticky error after a kernel faulted, says the driver refused it and matches the
// driver's error, never arena.ErrInvalid, the caller's mistake, which a Prefetch of nothing
// still says. Before, every refusal wrapped arena.ErrInvalid.
func TestFakeManagedPrefetchRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewManaged(public(d))
	must(t, "NewManaged", err)
	a := newArena(t, p, 16<<20)
	s, err := a.Alloc(1<<20, 256)
	must(t, "Alloc", err)
	loc := public(d).Location()
	must(t, "Prefetch", p.Prefetch(s.Base, s.Size, loc, 0))
	must(t, "Synchronize", d.Synchronize())
	unload := stickyFault(t, f, d)
	err = p.Prefetch(s.Base, s.Size, loc, 0)
	if !errors.Is(err, pinmalloc.ErrRefused) || !errors.Is(err, pinmalloc.ErrDeviceFault) ||
		errors.Is(err, arena.ErrInvalid) {
		t.Errorf("Prefetch after a fault = %v; want pinmalloc.ErrRefused and the fault, not "+
			"arena.ErrInvalid", err)
	}
	f.ClearStickyError()
	unload()
	if err := p.Prefetch(s.Base, 0, loc, 0); !errors.Is(err, arena.ErrInvalid) ||
		!errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("Prefetch of nothing = %v; want arena.ErrInvalid and the driver's error", err)
	}
	must(t, "Free", a.Free(s))
}
