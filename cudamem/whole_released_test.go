package cudamem_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeWholeRegionUseAfterRelease: a Commit or Decommit of a region of DeviceMalloc,
// HostAlloc or Managed that the provider released, or did not reserve, is refused with
// arena.ErrInvalid, as the VMM and registration providers refuse theirs. Before, both returned
// nil: a caller was told that memory the driver had freed (and may have handed to another
// allocation since) was committed.
func TestFakeWholeRegionUseAfterRelease(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, pr := range providersOf(d, "DeviceMalloc", "HostAlloc", "Managed") {
		p, err := pr.new()
		must(t, pr.name, err)
		r, err := p.Reserve(2<<20, 2<<20)
		must(t, "Reserve", err)
		foreign := &arena.Region{Base: r.Base, Size: r.Size, Committed: true}
		must(t, "Commit", p.Commit(r, 0, 1<<20))
		must(t, "Decommit", p.Decommit(r, 0, 1<<20))
		must(t, "Release", p.Release(r))
		for _, c := range []struct {
			name string
			err  error
		}{
			{"Commit of a region not its own", p.Commit(foreign, 0, 1<<20)},
			{"Decommit of a region not its own", p.Decommit(foreign, 0, 1<<20)},
			{"Commit of a released region", p.Commit(r, 0, 1<<20)},
			{"Decommit of a released region", p.Decommit(r, 0, 1<<20)},
		} {
			if !errors.Is(c.err, arena.ErrInvalid) {
				t.Errorf("%s: %s: %v, want arena.ErrInvalid", pr.name, c.name, c.err)
			}
		}
	}
}
