package cudamem_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeMapHostExportsNil: a nil export among those MapHostExports is given is refused with
// arena.ErrInvalid, and the others are given back as on any other refusal. Before, it panicked
// (a nil pointer dereference) at the first export or in the loop.
func TestFakeMapHostExportsNil(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, at := range []int{0, 1} {
		e, err := cudamem.NewHostExport(public(d), 2<<20)
		must(t, "NewHostExport", err)
		exports := []*cudamem.HostExport{e, e}
		exports[at] = nil
		if m, err := cudamem.MapHostExports(public(d), exports); m != nil || !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("MapHostExports with export %d nil: %v, %v; want nil and arena.ErrInvalid", at, m, err)
		}
		must(t, "Release", e.Release())
	}
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 || f.Stat(fakecuda.Mappings) != 0 {
		t.Fatalf("%d handles, %d reservations, %d mappings left", st.Handles, st.Reservations, f.Stat(fakecuda.Mappings))
	}
}
