package cudamem_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHostRegisterCommitClaimed: an arena Commit of part of a span that is committed and
// claimed already (a caller making sure of memory it holds) leaves the span one registration,
// so that the span still copies in one call. Before, the Commit joined its own range, which
// cut the span's registration in three: the copy of the span failed with
// CUDA_ERROR_INVALID_VALUE, and the span's memory outside the range had been unregistered and
// registered again while it was the caller's.
func TestFakeHostRegisterCommitClaimed(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	a := newArena(t, p, 64<<20)
	const g = arena.DefaultChunkSize
	s, err := a.Alloc(5*g, g)
	must(t, "Alloc", err)
	copyBoth(t, d, s.Base, s.Size)
	calls := p.Counters().Calls
	if _, err := a.Commit(s.Base+2*g, g); err != nil {
		t.Fatalf("Commit of a claimed chunk of the span: %v", err)
	}
	if n := p.Counters().Calls - calls; n != 0 {
		t.Errorf("Commit of a claimed chunk made %d driver calls, want none", n)
	}
	if b, n, ok := p.RegistrationOf(s.Base); !ok || b != s.Base || n != s.Size {
		t.Errorf("after the Commit the span [%#x, +%d) is registered as [%#x, +%d) (%v), "+
			"want one registration", s.Base, s.Size, b, n, ok)
	}
	copyBoth(t, d, s.Base, s.Size)
	must(t, "Free", a.Free(s))
}
