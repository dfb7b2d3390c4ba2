package uvm_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestFaultErrorsMatchUVMDeviceFault: once a kernel has faulted (the context's sticky error),
// every call of the tier that the driver fails says so with uvm.ErrDeviceFault, as package
// device's, pinned's and copyengine's calls say it with theirs: an Evict, an AcquireHost of a
// block on the device, a Prefetch and an Acquire of a block on the host, an AcquireContext, a
// MakeRoom, a Release whose event cannot be recorded, a Free whose memory is held back, a Sync
// and a Close that keep it. Each says the driver's error once. Before, only a Release (and an
// Acquire or Prefetch on a stream first seen after the fault) matched uvm.ErrDeviceFault; the
// others matched pinmalloc.ErrDeviceFault alone ("uvm: eviction of 1 block (0 copied): uvm:
// wait on stream ...: cuda: CUDA_ERROR_ILLEGAL_ADDRESS: fake driver error"), which a user
// testing errors.Is(err, uvm.ErrDeviceFault) took for another failure.
func TestFaultErrorsMatchUVMDeviceFault(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	var hs [4]uvm.Handle
	for i := range hs {
		h, err := tr.Alloc(64 * kib)
		must(t, err)
		_, err = tr.Acquire(h, s, uvm.Write)
		must(t, err)
		if i < 3 { // hs[3] stays acquired, for the Release
			must(t, tr.Release(h, s))
		}
		hs[i] = h
	}
	must(t, tr.Evict(hs[2:3])) // on the host, for the restores
	must(t, tr.Sync())
	f.Fault(t, dev)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, uvm.ErrDeviceFault) || !errors.Is(err, pinmalloc.ErrDeviceFault) {
			t.Errorf("%s after a fault: %v; want an error matching uvm.ErrDeviceFault", what, err)
			return
		}
		if n := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
			t.Errorf("%s after a fault: %q says the fault %d times", what, err, n)
		}
	}
	check("Evict", tr.Evict(hs[:1]))
	_, err := tr.AcquireHost(hs[1], uvm.Read)
	check("AcquireHost of a block on the device", err)
	check("Prefetch", tr.Prefetch(hs[2:3], s))
	_, err = tr.Acquire(hs[2], s, uvm.Read)
	check("Acquire", err)
	_, err = tr.AcquireContext(context.Background(), hs[2], s, uvm.Read)
	check("AcquireContext", err)
	check("MakeRoom", tr.MakeRoom(512*kib))
	check("Release", tr.Release(hs[3], s))
	check("Free", tr.Free(hs[0]))
	check("Sync", tr.Sync())
	check("Close", tr.Close())
	f.ClearStickyError()
	must(t, tr.Close())
}
