package cudamem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeVMMAddressFreeRefused: closing an arena whose region's cuMemAddressFree the driver
// refuses (its granules unmapped and released already) returns the refusal, said once, and
// keeps the region, its reservation counted by the provider; the next Close frees the
// reservation, once, and releases nothing twice.
func TestFakeVMMAddressFreeRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	for _, name := range []string{"DeviceVMM", "HostVMM"} {
		var p counted
		var err error
		if name == "DeviceVMM" {
			p, err = cudamem.NewDeviceVMM(public(d))
		} else {
			p, err = cudamem.NewHostVMM(public(d), cudamem.HostOptions{})
		}
		must(t, name, err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 8 << 20, RegionSize: 8 << 20,
			PurgeDelay: -1})
		must(t, "arena.New", err)
		s, err := a.Alloc(2<<20, arena.DefaultChunkSize)
		must(t, "Alloc", err)
		must(t, "Free", a.Free(s))
		f.FailAfter(fakecuda.CallAddressFree, 0, fakecuda.ResultInvalidValue)
		err = a.Close()
		if !errors.Is(err, arena.ErrReleaseRefused) || !errors.Is(err, pinmalloc.ErrInvalidValue) ||
			strings.Count(err.Error(), "INVALID_VALUE") != 1 {
			t.Errorf("%s: Close with cuMemAddressFree refused = %v, want ErrReleaseRefused and "+
				"ErrInvalidValue, said once", name, err)
		}
		if c := p.Counters(); c.Reservations != 1 || c.Handles != 0 || c.Committed != 0 ||
			f.Stat(fakecuda.Reservations) != 1 || f.Stat(fakecuda.Mappings) != 0 {
			t.Errorf("%s: after the refused Close: provider %+v, fake %d reservations, %d "+
				"mappings; want the reservation alone", name, c, f.Stat(fakecuda.Reservations),
				f.Stat(fakecuda.Mappings))
		}
		if st := a.Stats(); st.RegionsRefused != 1 {
			t.Errorf("%s: the arena counts %d regions refused, want 1", name, st.RegionsRefused)
		}
		must(t, name+": Close again", a.Close())
		if c := p.Counters(); c.Live() != 0 || f.Stat(fakecuda.Reservations) != 0 ||
			f.Stat(fakecuda.Handles) != 0 {
			t.Errorf("%s: after Close again: provider %+v, fake %d reservations, %d handles", name,
				c, f.Stat(fakecuda.Reservations), f.Stat(fakecuda.Handles))
		}
		if err := a.Close(); !errors.Is(err, arena.ErrClosed) {
			t.Errorf("%s: a third Close = %v, want ErrClosed", name, err)
		}
	}
}
