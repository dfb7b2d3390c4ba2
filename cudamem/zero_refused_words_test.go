package cudamem_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeZeroRefusedWords: a clear the arena asked correctly whose driver calls the driver
// refuses (its stream's cuStreamCreate, its cuMemsetD8Async, the wait for it, a stream's
// destroy) never says arena.ErrInvalid, the caller's mistake: a refusal before anything was
// queued says arena.ErrNotStarted, the others pinmalloc.ErrRefused, each with the driver's
// error, and one for want of memory arena.ErrExhausted too. Before, all of them wrapped
// arena.ErrInvalid, "invalid argument", and none arena.ErrExhausted.
func TestFakeZeroRefusedWords(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, pr := range providersOf(d, "DeviceMalloc", "DeviceVMM", "Managed") {
		p, err := pr.new()
		must(t, pr.name, err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
		must(t, "arena.New", err)
		s, err := a.Alloc(1<<20, 256)
		must(t, "Alloc", err)
		check := func(what string, err error, notStarted, oom bool) {
			t.Helper()
			if err == nil || errors.Is(err, arena.ErrInvalid) ||
				errors.Is(err, arena.ErrNotStarted) != notStarted ||
				errors.Is(err, pinmalloc.ErrRefused) != true ||
				errors.Is(err, arena.ErrExhausted) != oom ||
				errors.Is(err, pinmalloc.ErrOutOfMemory) != oom {
				t.Errorf("%s: %s: %v; want a refusal (not arena.ErrInvalid), arena.ErrNotStarted "+
					"%v, arena.ErrExhausted %v", pr.name, what, err, notStarted, oom)
			}
		}
		f.FailAfter(fakecuda.CallStreamCreate, 0, fakecuda.ResultOutOfMemory)
		check("Zero with its stream's cuStreamCreate out of memory", a.Zero(s.Base, 4096), true,
			true)
		must(t, "Zero", a.Zero(s.Base, 4096)) // its stream kept
		f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultOutOfMemory)
		check("Zero with its cuMemsetD8Async out of memory", a.Zero(s.Base, 4096), true, true)
		f.FailAfter(fakecuda.CallStreamSync, 0, fakecuda.ResultOutOfMemory)
		check("Zero with its wait out of memory", a.Zero(s.Base, 4096), false, true)
		f.Complete() // the failed clear's memset done
		f.FailAfter(fakecuda.CallStreamSync, 0, fakecuda.ResultInvalidValue)
		f.FailAfter(fakecuda.CallStreamDestroy, 0, fakecuda.ResultInvalidHandle)
		check("Zero with its wait failed and its stream's destroy refused",
			a.Zero(s.Base, 4096), false, false)
		f.Complete()
		f.FailAfter(fakecuda.CallStreamDestroy, 0, fakecuda.ResultInvalidHandle)
		check("ReleaseKept with a stream's destroy refused",
			p.(arena.KeptReleaser).ReleaseKept(), false, false)
		must(t, "Free", a.Free(s))
		must(t, "arena.Close", a.Close())
		if c := p.Counters(); c.Live() != 0 {
			t.Errorf("%s: after Close the provider counts %+v", pr.name, c)
		}
	}
}
