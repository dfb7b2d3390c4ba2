package cudamem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHostMappingAddressFreeRefused: a mapping's Close whose cuMemAddressFree the driver
// refuses (every allocation unmapped and released already) returns the refusal, said once, and
// keeps the reservation alone; the next Close frees it, once, and a Close after that does
// nothing.
func TestFakeHostMappingAddressFreeRefused(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	var exports []*cudamem.HostExport
	for range 2 {
		e, err := cudamem.NewHostExport(public(d), 2<<20)
		must(t, "NewHostExport", err)
		exports = append(exports, e)
	}
	m, err := cudamem.MapHostExports(public(d), exports)
	must(t, "MapHostExports", err)
	f.FailAfter(fakecuda.CallAddressFree, 0, fakecuda.ResultInvalidValue)
	err = m.Close()
	if !errors.Is(err, pinmalloc.ErrInvalidValue) || strings.Count(err.Error(), "INVALID_VALUE") != 1 {
		t.Errorf("Close with cuMemAddressFree refused = %v, want ErrInvalidValue, said once", err)
	}
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 1 || f.Stat(fakecuda.Mappings) != 0 {
		t.Errorf("after the refused Close: %d handles, %d reservations, %d mappings; want the "+
			"reservation alone", st.Handles, st.Reservations, f.Stat(fakecuda.Mappings))
	}
	if m.Base() != 0 {
		t.Errorf("Base after Close = %#x", m.Base())
	}
	must(t, "Close again", m.Close())
	must(t, "Close after that", m.Close())
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 || f.Stat(fakecuda.Mappings) != 0 {
		t.Errorf("after Close again: %d handles, %d reservations, %d mappings", st.Handles,
			st.Reservations, f.Stat(fakecuda.Mappings))
	}
}

// TestFakeHostMappingCloseAfterFault: under the context's sticky error the driver refuses
// every part of a mapping's Close alike; Close says the fault once, keeps everything, and a
// Close once the error is cleared gives each part back once.
func TestFakeHostMappingCloseAfterFault(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	var exports []*cudamem.HostExport
	for range 3 {
		e, err := cudamem.NewHostExport(public(d), 2<<20)
		must(t, "NewHostExport", err)
		exports = append(exports, e)
	}
	m, err := cudamem.MapHostExports(public(d), exports)
	must(t, "MapHostExports", err)
	unload := stickyFault(t, f, d)
	err = m.Close()
	if !errors.Is(err, pinmalloc.ErrDeviceFault) ||
		strings.Count(err.Error(), "ILLEGAL_ADDRESS") != 1 {
		t.Errorf("Close after a fault = %v, want ErrDeviceFault, said once", err)
	}
	f.ClearStickyError()
	unload()
	must(t, "Close once the error is cleared", m.Close())
	if st := d.Stats(); st.Handles != 0 || st.Reservations != 0 || f.Stat(fakecuda.Mappings) != 0 {
		t.Errorf("after Close again: %d handles, %d reservations, %d mappings", st.Handles,
			st.Reservations, f.Stat(fakecuda.Mappings))
	}
}
