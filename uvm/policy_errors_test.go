package uvm_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestLRUCountsNoPolicyErrors: an eviction that takes a clean block among the coldest, then more
// in policy order, meets that block again in its second walk of the policy; the built-in LRU
// keeps its contract, and Stats.PolicyErrors stays 0. The second walk counted the block taken
// by the first as a policy's mistake.
func TestLRUCountsNoPolicyErrors(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 16 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size})
	use := func(h uvm.Handle, m uvm.Mode) {
		t.Helper()
		_, err := tr.Acquire(h, 0, m)
		must(t, err)
		must(t, tr.Release(h, 0))
	}
	var hs []uvm.Handle
	for range 5 { // the fifth evicts the first, written: a copy of it on the host
		h, err := tr.Alloc(size)
		must(t, err)
		use(h, uvm.Write)
		hs = append(hs, h)
	}
	use(hs[0], uvm.Read) // back on the device, clean (its host copy still holds), evicting hs[1]
	for _, h := range hs[2:] {
		use(h, uvm.Write) // hs[0] the coldest
	}
	before := tr.Stats().CleanEvictions
	big, err := tr.Alloc(2 * size) // two blocks' room: hs[0], clean, then hs[2]
	must(t, err)
	use(big, uvm.Write)
	st := tr.Stats()
	if st.CleanEvictions-before != 1 {
		t.Fatalf("%d clean evictions, want 1: the clean block first", st.CleanEvictions-before)
	}
	if st.PolicyErrors != 0 {
		t.Errorf("Stats.PolicyErrors = %d with the built-in LRU, want 0", st.PolicyErrors)
	}
	must(t, tr.Sync())
}
