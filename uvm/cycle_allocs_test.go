package uvm_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestFakeBlockCycleAllocatesNothing: the tier's hot paths make no heap allocation once warm:
// an Acquire and Release of a resident block (BenchmarkAcquireRelease's hit), an Alloc and Free
// of a block never acquired, and a block's whole life on the device, Alloc, Acquire for writing
// (its first, which gives it VRAM), Release and Free (its VRAM back behind the D2H stream, then
// spare for the next block). That life used to cost three allocations: the Acquire's list of one
// block to restore (the scratch list never kept), and the Free's list of one VRAM block and its
// list of errors, made for one nil error.
func TestFakeBlockCycleAllocatesNothing(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	if invariants.Enabled {
		t.Skip("the invariants' checks allocate")
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20})
	s := stream(t, dev)
	var failed error
	note := func(err error) {
		if err != nil && failed == nil {
			failed = err
		}
	}
	h, err := tr.Alloc(64 * kib)
	must(t, err)
	hit := func() {
		_, err := tr.Acquire(h, s, uvm.Read)
		note(err)
		note(tr.Release(h, s))
	}
	fresh := func() {
		h, err := tr.Alloc(64 * kib)
		note(err)
		note(tr.Free(h))
	}
	life := func() {
		h, err := tr.Alloc(64 * kib)
		note(err)
		_, err = tr.Acquire(h, s, uvm.Write)
		note(err)
		note(tr.Release(h, s))
		note(tr.Free(h))
	}
	for _, c := range []struct {
		name string
		run  func()
	}{{"Acquire+Release of a resident block", hit}, {"Alloc+Free", fresh}, {"Alloc+Acquire+Release+Free", life}} {
		c.run() // warm: the tables and the lists grow once
		if a := testing.AllocsPerRun(50, c.run); a != 0 {
			t.Errorf("%s: %v allocations, want 0", c.name, a)
		}
		must(t, failed)
	}
	must(t, tr.Free(h))
}
