package device

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeSyncRefusedStreamAnsweredBesideParkedFree and ...Trim...: a Sync or Trim whose drain
// meets a stream destroyed without ForgetStream (the driver refuses its handle) answers it with a
// synchronize of the context and does its frees: it says no error of that stream, even while a
// held block's free stays parked meanwhile (its first clear refused: its second settle clears
// and frees it). Before, the drain kept the refused stream's error while any free was deferred,
// parked ones (which no drain does) included, and the call returned it ("wait for deferred frees:
// ... wait for stream ...: CUDA_ERROR_INVALID_HANDLE") for frees it had done.
func TestFakeSyncRefusedStreamAnsweredBesideParkedFree(t *testing.T) {
	testRefusedStreamAnsweredBesideParkedFree(t, "Sync", (*Heap).Sync)
}

func TestFakeTrimRefusedStreamAnsweredBesideParkedFree(t *testing.T) {
	testRefusedStreamAnsweredBesideParkedFree(t, "Trim", (*Heap).Trim)
}

func testRefusedStreamAnsweredBesideParkedFree(t *testing.T, name string, call func(*Heap) error) {
	t.Helper()
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a := newStream(t, dev, h)
	parkPassedRefusedFree(t, f, h, a, 64<<10)
	u, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	p := alloc(t, h, 64<<10, a)
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	must(t, "FreeAsync on u", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(u)))
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(u))
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue) // the first settle's clear
	if err := call(h); err != nil {
		t.Errorf("%s with the parked free's first clear refused, its second made, and a destroyed "+
			"stream's free: %v; want nil", name, err)
	}
	h.mu.Lock()
	left := len(h.parked)
	h.mu.Unlock()
	if st := h.Stats(); st.Deferred != 0 || left != 0 {
		t.Errorf("after %s: %d deferred, %d parked; want 0, 0", name, st.Deferred, left)
	}
}
