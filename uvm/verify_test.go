package uvm_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestVerifyAccounts: the tier's accounts agree with its blocks through evictions and
// restores, and Verify catches a count that does not.
func TestVerifyAccounts(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	hs := filled(t, tr, 8, 256<<10) // twice the budget: half evicted
	for _, h := range hs {
		if _, err := tr.Acquire(h, s, uvm.Read); err != nil {
			t.Fatal(err)
		}
		must(t, tr.Release(h, s))
		must(t, tr.Verify())
	}
	must(t, tr.Free(hs[0]))
	must(t, tr.Sync())
	must(t, tr.Verify())
	tr.SkewAccounts(hostAlign)
	if err := tr.Verify(); err == nil {
		t.Fatal("Verify missed device bytes counted twice")
	}
	tr.SkewAccounts(^uintptr(hostAlign - 1)) // minus hostAlign
	must(t, tr.Verify())
}

const hostAlign = 256
