package uvm_test

import (
	"testing"
	"unsafe"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// funcID is the identity of a func value: copies of one value share it, two values made apart
// (two method values, two closures) never do.
func funcID(f device.PressureFunc) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&f)) }

// TestSharedHeapHookChainLeavesNoLink: tiers given one device heap, closed out of the order of
// their New, leave the heap's hook exactly the one it had before them, not a pass-through link
// of a closed tier calling it. Closed in the order first, second (and first, third, second of
// three), the second's Close put back the hook it had replaced, the closed first tier's link,
// which stayed in the chain for as long as the heap lived, one call deeper for every Alloc that
// ran short.
func TestSharedHeapHookChainLeavesNoLink(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	orig := device.PressureFunc(func(int, cuda.Stream) bool { return false })
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256, Pressure: orig})
	must(t, err)
	open := func() *uvm.Tier {
		tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 1 << 20, Heap: h})
		must(t, err)
		return tr
	}
	for _, order := range [][]int{{0, 1}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}} {
		ts := make([]*uvm.Tier, len(order))
		for i := range ts {
			ts[i] = open()
		}
		for _, i := range order {
			must(t, ts[i].Close())
		}
		prev := h.SetPressure(orig)
		if prev == nil || funcID(prev) != funcID(orig) {
			t.Errorf("tiers closed in the order %v: the heap's hook is not the one it had", order)
		}
	}
	must(t, h.Close())
}

// TestSharedHeapUserHookOverTierSurvivesClose: a user of a shared heap who installs a pressure
// hook of their own after a tier's New (over the tier's, which they may chain to) keeps it
// through the tier's Close: the tier, the newest tier on the heap, put back the hook it had
// replaced, and the user's was lost. A later tier's Close, its hook still on top, puts back
// what it replaced as before.
func TestSharedHeapUserHookOverTierSurvivesClose(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	orig := device.PressureFunc(func(int, cuda.Stream) bool { return false })
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256, Pressure: orig})
	must(t, err)
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 1 << 20, Heap: h})
	must(t, err)
	var below device.PressureFunc
	user := device.PressureFunc(func(n int, s cuda.Stream) bool { return below(n, s) })
	below = h.SetPressure(user)
	must(t, tr.Close())
	if got := h.SetPressure(user); got == nil || funcID(got) != funcID(user) {
		t.Fatal("the tier's Close took off the hook a user installed over the tier's")
	}
	if below(1, 0) { // the closed tier's link: it passes the call on to orig
		t.Error("the closed tier's link, below the user's hook, gave memory back")
	}
	tr2, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 1 << 20, Heap: h})
	must(t, err)
	must(t, tr2.Close())
	if got := h.SetPressure(orig); got == nil || funcID(got) != funcID(user) {
		t.Error("a tier's Close did not put back the user's hook it had replaced")
	}
	must(t, h.Close())
}
