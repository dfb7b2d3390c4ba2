package cudamem_test

import (
	"errors"
	"os"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHostRegisterUnalignedRange: a Commit, Prefault, Join or Decommit of a HostRegister
// range that does not start and end on a page of the mapping is refused with arena.ErrInvalid
// before it touches anything: the region's registrations stay as they were. Before, a Decommit
// from byte 1 cut the chunk's registration into a 1-byte one and the rest, two registrations
// of one page, then failed its madvise saying that the decommit was left unfinished (the range
// taken for uncommitted); one of 4095 bytes at a page dropped a registration and said nil.
func TestFakeHostRegisterUnalignedRange(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := cudamem.NewHostRegister(public(d), cudamem.HostOptions{})
	must(t, "NewHostRegister", err)
	r, err := p.Reserve(4<<20, 2<<20)
	must(t, "Reserve", err)
	defer func() { must(t, "Release", p.Release(r)) }()
	must(t, "Commit", p.Commit(r, 0, 2<<20))
	page := uintptr(os.Getpagesize())
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Decommit from byte 1", func() error { return p.Decommit(r, 1, page) }},
		{"Decommit of a page less one byte", func() error { return p.Decommit(r, page, page-1) }},
		{"Join from byte 1", func() error { return p.Join(r, 1, page) }},
		{"Commit from a byte past the chunk", func() error { return p.Commit(r, 2<<20+1, page) }},
		{"Prefault from a byte past the chunk", func() error { return p.Prefault(r, 2<<20+1, page) }},
	} {
		calls := p.Counters().Calls
		if err := c.call(); !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("%s: %v, want arena.ErrInvalid", c.name, err)
		}
		if n := p.Counters().Calls - calls; n != 0 {
			t.Errorf("%s: %d driver calls, want none", c.name, n)
		}
		if base, size, ok := p.RegistrationOf(r.Base); !ok || base != r.Base || size != 2<<20 {
			t.Fatalf("after %s: the chunk's registration is [%#x, +%d) (%v), want [%#x, +%d)",
				c.name, base, size, ok, r.Base, 2<<20)
		}
	}
	if c := p.Counters(); c.Registrations != 1 || c.Committed != 2<<20 {
		t.Errorf("counters %+v, want one registration of 2 MiB", c)
	}
}
