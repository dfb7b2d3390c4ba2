package cudamem_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestFakeZeroStreamDestroyRefused: a clear stream whose destroy the driver refuses
// (INVALID_HANDLE) at Arena.Close stays the provider's, counted, and the next Close destroys it,
// once.
func TestFakeZeroStreamDestroyRefused(t *testing.T) {
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
		must(t, "Zero", a.Zero(s.Base, 4096))
		must(t, "Free", a.Free(s))
		f.FailAfter(fakecuda.CallStreamDestroy, 0, fakecuda.ResultInvalidHandle)
		err = a.Close()
		if !errors.Is(err, pinmalloc.ErrInvalidHandle) ||
			strings.Count(err.Error(), "INVALID_HANDLE") != 1 {
			t.Errorf("%s: Close with the stream's destroy refused = %v, want ErrInvalidHandle, "+
				"said once", pr.name, err)
		}
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 1 || c.Streams != 1 {
			t.Errorf("%s: after the refused Close: %d streams live, the provider counts %d; "+
				"want 1, 1", pr.name, n, c.Streams)
		}
		must(t, "arena.Close again", a.Close())
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 0 || c.Live() != 0 {
			t.Errorf("%s: after Close again: %d streams live, the provider counts %+v", pr.name,
				n, c)
		}
		if err := a.Close(); !errors.Is(err, arena.ErrClosed) {
			t.Errorf("%s: a third Close = %v, want ErrClosed", pr.name, err)
		}
	}
}

// TestFakeZeroAfterFault: under the context's sticky error (after a kernel faulted) a clear's
// wait fails and its stream's destroy is refused, both with the fault; the clear's error says
// it once, the stream stays the provider's, and Close says the fault once for its streams,
// keeps them, and a Close once the error is cleared destroys each once.
func TestFakeZeroAfterFault(t *testing.T) {
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
		unload := stickyFault(t, f, d)
		err = a.Zero(s.Base, 4096)
		if !errors.Is(err, pinmalloc.ErrDeviceFault) ||
			strings.Count(err.Error(), "ILLEGAL_ADDRESS") != 1 {
			t.Errorf("%s: Zero after a fault = %v, want ErrDeviceFault, said once", pr.name, err)
		}
		must(t, "Free", a.Free(s))
		err = a.Close()
		if !errors.Is(err, pinmalloc.ErrDeviceFault) {
			t.Errorf("%s: Close after a fault = %v, want ErrDeviceFault", pr.name, err)
		}
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 1 || c.Streams != 1 {
			t.Errorf("%s: after the refused Close: %d streams live, the provider counts %d; "+
				"want 1, 1", pr.name, n, c.Streams)
		}
		f.ClearStickyError()
		unload()
		must(t, "arena.Close once the error is cleared", a.Close())
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 0 || c.Live() != 0 {
			t.Errorf("%s: after Close again: %d streams live, the provider counts %+v", pr.name,
				n, c)
		}
	}
}

// TestFakeZeroStreamsRefusedSaidOnce: under the context's sticky error the driver refuses to
// destroy each of the provider's two clear streams alike; ReleaseKept says the fault once, not
// once per stream, and keeps both, and a Close once the error is cleared destroys each once.
func TestFakeZeroStreamsRefusedSaidOnce(t *testing.T) {
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
		// Two clears at once, the first stopped at its first driver call: a stream each.
		if !f.PauseNextCall() {
			t.Fatal("PauseNextCall armed nothing")
		}
		first := make(chan error, 1)
		go func() { first <- a.Zero(s.Base, 4096) }()
		for !f.Paused() {
			runtime.Gosched()
		}
		must(t, "Zero beside a stopped one", a.Zero(s.Base+8192, 4096))
		f.ResumeCall()
		must(t, "the stopped Zero", <-first)
		if n := f.Stat(fakecuda.Streams); n != 2 {
			t.Fatalf("%s: %d streams after two clears at once, want 2", pr.name, n)
		}
		unload := stickyFault(t, f, d)
		err = p.(arena.KeptReleaser).ReleaseKept()
		if !errors.Is(err, pinmalloc.ErrDeviceFault) ||
			strings.Count(err.Error(), "ILLEGAL_ADDRESS") != 1 {
			t.Errorf("%s: ReleaseKept after a fault = %v, want ErrDeviceFault, said once",
				pr.name, err)
		}
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 2 || c.Streams != 2 {
			t.Errorf("%s: after the refused ReleaseKept: %d streams live, the provider counts "+
				"%d; want 2, 2", pr.name, n, c.Streams)
		}
		f.ClearStickyError()
		unload()
		must(t, "Free", a.Free(s))
		must(t, "arena.Close once the error is cleared", a.Close())
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 0 || c.Live() != 0 {
			t.Errorf("%s: after Close: %d streams live, the provider counts %+v", pr.name, n, c)
		}
	}
}

// faultPTX declares the gather kernel the fake runs; its body does not matter to the fake.
const faultPTX = `.version 7.0
.target sm_75
.address_size 64

.visible .entry pinmalloc_gather(
	.param .u64 jobs,
	.param .u64 count
)
{
	ret;
}
`

// stickyFault launches the fake's gather kernel on a job array the device cannot reach: the
// kernel faults, and the context's error is sticky (CUDA_ERROR_ILLEGAL_ADDRESS) until the fake
// clears it (at cleanup, at the latest). It returns what unloads the module, to call once the
// error is cleared.
func stickyFault(t *testing.T, f *fakecuda.Driver, d *cuda.Device) (unload func()) {
	t.Helper()
	m, err := d.ModuleLoadData(faultPTX)
	must(t, "ModuleLoadData", err)
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	pageable := make([]uint64, 8)
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	must(t, "LaunchKernel", d.LaunchKernel(fn, one, one, 0, 0, uint64(mem.WordsAddr(pageable)), 1))
	t.Cleanup(f.ClearStickyError)
	if err := d.Synchronize(); err == nil || f.StickyError() != fakecuda.ResultIllegalAddress {
		t.Fatalf("the faulting kernel left no sticky error: %v", err)
	}
	runtime.KeepAlive(pageable)
	return func() { must(t, "ModuleUnload", d.ModuleUnload(m)) }
}
