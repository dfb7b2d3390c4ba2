package cudamem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeZeroWaitFailedNotReused: a clear whose wait (cuStreamSynchronize) fails leaves its
// stream in an unknown state (the fake leaves the memset queued on it); when the driver then
// refuses to destroy it, the provider keeps it, counted, but never clears on it again: the
// next clear takes a new stream, and the one kept is destroyed at Close. Before, it went back
// to the streams kept for the next clears, and the next clear reused it.
func TestFakeZeroWaitFailedNotReused(t *testing.T) {
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
		must(t, "Zero", a.Zero(s.Base, 4096)) // its stream kept
		f.FailAfter(fakecuda.CallStreamSync, 0, fakecuda.ResultInvalidValue)
		f.FailAfter(fakecuda.CallStreamDestroy, 0, fakecuda.ResultInvalidHandle)
		err = a.Zero(s.Base, 4096)
		if !errors.Is(err, pinmalloc.ErrInvalidValue) || !errors.Is(err, pinmalloc.ErrInvalidHandle) ||
			strings.Count(err.Error(), "INVALID_VALUE") != 1 ||
			strings.Count(err.Error(), "INVALID_HANDLE") != 1 {
			t.Errorf("%s: Zero with its wait failed and its stream's destroy refused = %v, want "+
				"ErrInvalidValue and ErrInvalidHandle, each said once", pr.name, err)
		}
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 1 || c.Streams != 1 {
			t.Errorf("%s: after the failed clear: %d streams live, the provider counts %d; "+
				"want 1, 1 (kept)", pr.name, n, c.Streams)
		}
		must(t, "Zero after the failed one", a.Zero(s.Base, 4096))
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 2 || c.Streams != 2 {
			t.Errorf("%s: after the next clear: %d streams live, the provider counts %d; want "+
				"2, 2 (a new stream beside the one whose wait failed)", pr.name, n, c.Streams)
		}
		if n := f.Pending(); n != 1 {
			t.Errorf("%s: %d streams with work queued after the next clear, want 1 (the failed "+
				"clear's, untouched)", pr.name, n)
		}
		f.Complete() // the failed clear's memset done, before its memory is given back
		must(t, "Free", a.Free(s))
		// The stream kept aside is destroyed at Close: refused once, said once, kept for the
		// next Close (the stream in use for clears goes first, then those kept aside).
		f.FailAfter(fakecuda.CallStreamDestroy, 1, fakecuda.ResultInvalidHandle)
		err = a.Close()
		if !errors.Is(err, pinmalloc.ErrInvalidHandle) ||
			strings.Count(err.Error(), "INVALID_HANDLE") != 1 {
			t.Errorf("%s: Close with the kept stream's destroy refused = %v, want "+
				"ErrInvalidHandle, said once", pr.name, err)
		}
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 1 || c.Streams != 1 {
			t.Errorf("%s: after the refused Close: %d streams live, the provider counts %d; "+
				"want 1, 1", pr.name, n, c.Streams)
		}
		must(t, "arena.Close again", a.Close())
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 0 || c.Live() != 0 {
			t.Errorf("%s: after Close: %d streams live, the provider counts %+v", pr.name, n, c)
		}
	}
}
