package cudamem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeReleaseRefusedWords: a Release whose freeing call the driver refuses (cuMemFree,
// cuMemFreeHost, cuMemAddressFree) says that memory could not be given back and matches
// arena.ErrCommit and the driver's error, never arena.ErrInvalid: that is what a Release of a
// region released already, or not the provider's, returns, and a caller of the provider tells
// by it a misuse (nothing kept, nothing to retry) from a refusal (the region kept, a later
// Release tries again). Before, the refusals wrapped arena.ErrInvalid, "invalid argument".
func TestFakeReleaseRefusedWords(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetHostVMM(true)
	calls := map[string]fakecuda.PinCall{
		"DeviceMalloc": fakecuda.CallMemFree, "Managed": fakecuda.CallMemFree,
		"HostAlloc": fakecuda.CallFreeHost, "DeviceVMM": fakecuda.CallAddressFree,
		"HostVMM": fakecuda.CallAddressFree,
	}
	for _, pr := range providersOf(d, "DeviceMalloc", "DeviceVMM", "HostAlloc", "HostVMM",
		"Managed") {
		p, err := pr.new()
		must(t, pr.name, err)
		r, err := p.Reserve(2<<20, 2<<20)
		must(t, pr.name+": Reserve", err)
		f.FailAfter(calls[pr.name], 0, fakecuda.ResultInvalidValue)
		err = p.Release(r)
		if !errors.Is(err, arena.ErrCommit) || errors.Is(err, arena.ErrInvalid) ||
			!errors.Is(err, pinmalloc.ErrInvalidValue) ||
			!strings.Contains(err.Error(), "cannot give memory back") {
			t.Errorf("%s: Release with its free refused: %v; want arena.ErrCommit (cannot give "+
				"memory back) and the driver's error, not arena.ErrInvalid", pr.name, err)
		}
		must(t, pr.name+": Release again", p.Release(r))
		if err := p.Release(r); !errors.Is(err, arena.ErrInvalid) {
			t.Errorf("%s: a Release of a released region: %v, want arena.ErrInvalid", pr.name, err)
		}
		if c := p.Counters(); c.Live() != 0 {
			t.Errorf("%s: after the Release: %+v", pr.name, c)
		}
	}
}
