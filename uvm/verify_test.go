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

// TestVerifyBatches: Verify checks the batches in flight against the tier's count of the
// batches issued and completed: it accepts them with an eviction in flight and after Sync, and
// catches a batch in flight counted as completed (a restore would no longer wait for it), and
// a completed batch counted as in flight.
func TestVerifyBatches(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	hs := filled(t, tr, 2, 256<<10)
	for _, h := range hs {
		if _, err := tr.Acquire(h, s, uvm.Write); err != nil {
			t.Fatal(err)
		}
		must(t, tr.Release(h, s))
	}
	must(t, tr.Sync())
	must(t, tr.Evict(hs)) // dirty: copied, one batch in flight until the next poll
	if st := tr.Stats(); st.Pending != 0 {
		t.Fatalf("Stats polled, %d batches in flight", st.Pending)
	}
	must(t, tr.Evict(nil)) // polls, queues nothing
	must(t, tr.Prefetch(hs, s))
	must(t, tr.Evict(hs))
	must(t, tr.Verify())
	for _, d := range []uint64{1, ^uint64(0)} { // in flight counted as completed, and back
		tr.SkewBatches(d)
		if err := tr.Verify(); err == nil {
			t.Fatalf("Verify missed a batch counted %+d from what is in flight", int64(d))
		}
		tr.SkewBatches(-d)
		must(t, tr.Verify())
	}
	must(t, tr.Sync())
	must(t, tr.Verify())
	tr.SkewBatches(^uint64(0)) // a completed batch counted as in flight
	if err := tr.Verify(); err == nil {
		t.Fatal("Verify missed a completed batch counted as in flight")
	}
	tr.SkewBatches(1)
	must(t, tr.Verify())
}
