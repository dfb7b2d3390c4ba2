package uvm_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestPrefetchKeepsItsOwnBlocks: a Prefetch of blocks that fit the budget together, some of them
// already resident and the coldest there, must not evict those to make room for the others.
// choosePrefetch marked only the blocks not on the device, so makeRoom took the resident ones
// first: after the Prefetch half the blocks it was given were back on the host (dirty ones
// copied out for nothing), and the next Acquire of each missed.
func TestPrefetchKeepsItsOwnBlocks(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 16 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 8 * size, ThrashLapse: -1})
	s := stream(t, dev)
	a := allocN(t, tr, 8, size)
	acquireAll(t, tr, s, uvm.Write, a) // the device is full; a[0] is the coldest
	b := allocN(t, tr, 2, size)        // fresh: no storage yet
	// a[0], a[1] (resident, the coldest) and b (not resident): 4 blocks, half the budget.
	hs := []uvm.Handle{a[0], a[1], b[0], b[1]}
	must(t, tr.Prefetch(hs, s))
	must(t, tr.Sync())
	before := tr.Stats().Misses
	for _, h := range hs {
		_, err := tr.Acquire(h, s, uvm.Read)
		must(t, err)
		must(t, tr.Release(h, s))
	}
	if miss := tr.Stats().Misses - before; miss != 0 {
		t.Errorf("%d of the %d blocks just prefetched (4 of a budget of 8) were not on the device: the Prefetch evicted its own blocks", miss, len(hs))
	}
	must(t, tr.Verify())
}
