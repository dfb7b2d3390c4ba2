package uvm_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestUnclosedTierServesItsHeap: a tier dropped without Close, on a device heap it was given
// that is still in use, is not collected: the heap's pressure hook holds it, and still evicts
// its blocks for another user of the heap that runs short. That is the behaviour chosen (see
// Tier's doc): the tier's blocks hold VRAM of that heap, which only the tier can give back, so
// a hook holding the tier weakly would, once the tier was collected, leave that VRAM allocated
// for good with nothing left to evict it. The hook never calls a collected tier: what it holds
// is not collected.
func TestUnclosedTierServesItsHeap(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size, n = 256 * kib, 24
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256})
	must(t, err)
	s, su := stream(t, dev), stream(t, dev)
	w := func() weak.Pointer[uvm.Tier] {
		tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: n * size, Heap: h})
		must(t, err)
		hs := filled(t, tr, n, size)
		acquireAll(t, tr, s, uvm.Read, hs) // 6 MiB of the heap's 8 on the device
		return weak.Make(tr)
	}()
	runtime.GC()
	runtime.GC()
	if w.Value() == nil {
		t.Fatal("a tier dropped without Close was collected while its device heap is in use: " +
			"its blocks' VRAM is in the heap, and nothing can give it back")
	}
	p, err := h.Alloc(4<<20, su) // does not fit beside the tier's 6 MiB
	if err != nil {
		t.Fatalf("another user's Alloc on the heap of a tier dropped without Close: %v", err)
	}
	tr := w.Value()
	if st := tr.Stats(); st.Out[uvm.CauseHeapPressure].Blocks == 0 {
		t.Errorf("the Alloc fit without the dropped tier's evictions: %+v", st)
	}
	must(t, h.Free(p))
	must(t, tr.Close())
	must(t, h.ForgetStream(su))
	must(t, h.ForgetStream(s))
	must(t, h.Close())
}
