package device

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCompareAndSwapPressure: CompareAndSwapPressure replaces the heap's hook only when it is the
// func value expected (a copy of it too, nil for none), never for another value that calls the
// same function, and leaves the hook as it was when it refuses.
func TestCompareAndSwapPressure(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h := newHeap(t, dev, Options{Capacity: 4 << 20})
	never := func(int, pcuda.Stream) bool { return false }
	a := PressureFunc(never)
	b := PressureFunc(func(n int, s pcuda.Stream) bool { return never(n, s) })
	if !h.CompareAndSwapPressure(nil, a) {
		t.Fatal("CompareAndSwapPressure(nil, a) refused with no hook")
	}
	if h.CompareAndSwapPressure(nil, b) {
		t.Error("CompareAndSwapPressure(nil, b) replaced a")
	}
	if h.CompareAndSwapPressure(b, nil) {
		t.Error("CompareAndSwapPressure(b, nil) replaced a, which is not b")
	}
	copyOfA := a
	if !h.CompareAndSwapPressure(copyOfA, b) {
		t.Error("CompareAndSwapPressure(a's copy, b) refused with a the hook")
	}
	if got := h.SetPressure(nil); got == nil || !SamePressure(got, b) {
		t.Error("the hook after the swap is not b")
	}
	if !h.CompareAndSwapPressure(nil, nil) || h.CompareAndSwapPressure(a, nil) {
		t.Error("with no hook: CompareAndSwapPressure(nil, nil) refused, or (a, nil) did not")
	}
	if SamePressure(a, b) || !SamePressure(nil, nil) || SamePressure(a, nil) {
		t.Error("SamePressure: a and b the same, or nil not nil, or a nil")
	}
}
