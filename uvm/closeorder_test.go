package uvm_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestSharedHeapTiersCloseInAnyOrder: two tiers given one device heap, closed in the order of
// their New (the first first), leave the heap's pressure hooks right: while the second is open,
// another user's Alloc that finds the heap full still makes it evict its cold blocks, and once
// both are closed the heap's hook is the one it had before them, and neither tier is reachable
// through it. Before, the first tier's Close put back the hook it had replaced, over the
// second's: the Alloc failed (out of memory, the second tier never asked, 6 MiB of cold blocks
// on the device), and the second's Close put the first's hook back, which held the closed
// tier for as long as the heap lived.
func TestSharedHeapTiersCloseInAnyOrder(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size, n = 256 * kib, 24
	calls := 0
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256,
		Pressure: func(int, cuda.Stream) bool { calls++; return false }})
	must(t, err)
	s, su := stream(t, dev), stream(t, dev)
	wa, wb := func() (weak.Pointer[uvm.Tier], weak.Pointer[uvm.Tier]) {
		a, err := uvm.New(public(dev), uvm.Options{DeviceBudget: n * size, Heap: h})
		must(t, err)
		b, err := uvm.New(public(dev), uvm.Options{DeviceBudget: n * size, Heap: h})
		must(t, err)
		acquireAll(t, b, s, uvm.Read, filled(t, b, n, size)) // 6 MiB of the heap's 8
		must(t, a.Close())
		return weak.Make(a), weak.Make(b)
	}()
	p, err := h.Alloc(4<<20, su) // does not fit beside the second tier's 6 MiB
	if err != nil {
		t.Errorf("another user's Alloc, the first tier closed: %v; want the second tier's evictions", err)
	} else {
		must(t, h.Free(p))
	}
	if got := wb.Value().Stats().Out[uvm.CauseHeapPressure].Blocks; err == nil && got == 0 {
		t.Error("the Alloc fit without the second tier's evictions")
	}
	must(t, wb.Value().Close())
	runtime.GC()
	runtime.GC()
	if wa.Value() != nil || wb.Value() != nil {
		t.Errorf("after both Closes, reachable: the first tier %t, the second %t; want neither",
			wa.Value() != nil, wb.Value() != nil)
	}
	if prev := h.SetPressure(nil); prev == nil {
		t.Error("the heap has no hook after both Closes, want the one it had")
	} else if calls = 0; prev(1, su) || calls != 1 {
		t.Errorf("the heap's hook after both Closes is not the one it had: %d calls of it", calls)
	}
	must(t, h.ForgetStream(su))
	must(t, h.ForgetStream(s))
	must(t, h.Close())
}
