package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestSyncAfterFaultSaysItOnce: a Sync whose transfers are in flight when the device faults
// waits for their stream, which the driver refuses (the sticky error), then synchronizes the
// device for them (Lists.Recover), which fails alike. Its error said the driver's error twice,
// once for each; now once, still in the chain, with ErrDeviceFault.
func TestSyncAfterFaultSaysItOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	b, err := tr.Alloc(64 * kib)
	must(t, err)
	s := stream(t, dev)
	_, err = tr.Acquire(b, s, uvm.Write)
	must(t, err)
	must(t, tr.Release(b, s))
	f.Hold(true) // the queries answer "not ready": the Free's completion stays in flight
	must(t, tr.Free(b))
	if st := tr.Stats(); st.Pending == 0 {
		t.Fatal("no transfer in flight after the Free")
	}
	f.Hold(false)

	f.Fault(t, dev)
	err = tr.Sync()
	if !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Fatalf("Sync after a fault: %v; want pinmalloc.ErrDeviceFault", err)
	}
	if code, _ := cuda.ResultCode(err); code != fakecuda.ResultIllegalAddress {
		t.Errorf("Sync after a fault: %v; want the driver's error in the chain", err)
	}
	if n := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
		t.Errorf("Sync after a fault says the driver's error %d times: %v", n, err)
	}
	f.ClearStickyError()
	if err := tr.Sync(); err != nil && !errors.Is(err, uvm.ErrHeldBack) {
		t.Fatalf("Sync once the context works again: %v", err)
	}
}
