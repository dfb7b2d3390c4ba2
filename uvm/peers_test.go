package uvm_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// peerBlock is the size of the blocks of the peer tests.
const peerBlock = 256 * kib

// writeBlocks allocates n blocks on tr and writes block i with pattern(seed+i) on the device,
// on stream s, released; it stops at the first Acquire that fails, and returns the blocks and
// that error.
func writeBlocks(t *testing.T, dev *icuda.Device, tr *uvm.Tier, s cuda.Stream, n int, seed byte) ([]uvm.Handle, error) {
	t.Helper()
	var hs []uvm.Handle
	for i := range n {
		h, err := tr.Alloc(peerBlock)
		must(t, err)
		hs = append(hs, h)
		p, err := tr.Acquire(h, s, uvm.Write)
		if err != nil {
			return hs, fmt.Errorf("block %d: %w", i, err)
		}
		writeDev(t, dev, s, p, pattern(seed+byte(i), peerBlock))
		must(t, tr.Release(h, s))
	}
	return hs, nil
}

// checkPeerBlocks reads every block of hs on the device and compares it with pattern(seed+i).
func checkPeerBlocks(t *testing.T, dev *icuda.Device, tr *uvm.Tier, s cuda.Stream, hs []uvm.Handle, seed byte) {
	t.Helper()
	for i, h := range hs {
		p, err := tr.Acquire(h, s, uvm.Read)
		must(t, err)
		got := readDev(t, dev, s, p, peerBlock)
		must(t, tr.Release(h, s))
		if !bytes.Equal(got, pattern(seed+byte(i), peerBlock)) {
			t.Fatalf("block %d lost its bytes: %#x at 0, want %#x", i, got[0], pattern(seed+byte(i), peerBlock)[0])
		}
	}
}

// TestPeersGiveRoom: two tiers share a device heap of 8 MiB; the first fills 7.5 MiB of it
// with dirty blocks, then the second, whose hook is the heap's (installed last), restores
// blocks of its own. Its own allocations answered their pressure themselves: with nothing of
// its own to evict, every Acquire failed (ErrAllPinned), however cold the first tier's blocks.
// The tier installed first got help the other way (the second's hook evicted for it). Now a
// tier asks its peers, and both tiers' blocks keep their bytes.
func TestPeersGiveRoom(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256})
	must(t, err)
	t.Cleanup(func() { must(t, h.Close()) })
	a := newTier(t, dev, uvm.Options{DeviceBudget: 8 << 20, Heap: h})
	b := newTier(t, dev, uvm.Options{DeviceBudget: 8 << 20, Heap: h})
	s := stream(t, dev)
	ha, err := writeBlocks(t, dev, a, s, 30, 0)
	must(t, err)
	hb, err := writeBlocks(t, dev, b, s, 8, 100)
	if err != nil {
		t.Fatalf("the second tier's blocks, with the first's cold on the device: %v", err)
	}
	if st := a.Stats(); st.Out[uvm.CauseHeapPressure].Blocks == 0 {
		t.Errorf("the first tier evicted nothing for the second: %+v", st)
	}
	checkPeerBlocks(t, dev, b, s, hb, 100)
	checkPeerBlocks(t, dev, a, s, ha, 0)
	for _, x := range ha {
		must(t, a.Free(x))
	}
	for _, x := range hb {
		must(t, b.Free(x))
	}
}

// TestPeersConcurrent: two tiers share a device heap smaller than their blocks together, and a
// goroutine per tier acquires its tier's blocks over and over: each restore asks the other tier
// for room (its lock only tried) while the other may be asking it, through its peers or the
// heap's hook. Nothing deadlocks (the test's timeout), and every block keeps its bytes.
func TestPeersConcurrent(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h, err := device.New(public(dev), device.Options{Capacity: 8 << 20, Align: 256})
	must(t, err)
	t.Cleanup(func() { must(t, h.Close()) })
	tiers := []*uvm.Tier{
		newTier(t, dev, uvm.Options{DeviceBudget: 6 << 20, Heap: h}),
		newTier(t, dev, uvm.Options{DeviceBudget: 6 << 20, Heap: h}),
	}
	const n, rounds = 20, 10
	ss := make([]cuda.Stream, len(tiers))
	hss := make([][]uvm.Handle, len(tiers))
	for k, tr := range tiers {
		ss[k] = stream(t, dev)
		hss[k], err = writeBlocks(t, dev, tr, ss[k], n, byte(50*k))
		must(t, err)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(tiers))
	for k, tr := range tiers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				for i, x := range hss[k] {
					if _, err := tr.Acquire(x, ss[k], uvm.Read); err != nil {
						errs[k] = fmt.Errorf("round %d, block %d: %w", r, i, err)
						return
					}
					if err := tr.Release(x, ss[k]); err != nil {
						errs[k] = err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	restores := uint64(0)
	for k, tr := range tiers {
		must(t, errs[k])
		restores += tr.Stats().In[uvm.CauseAcquire].Blocks
		checkPeerBlocks(t, dev, tr, ss[k], hss[k], byte(50*k))
	}
	if restores < rounds {
		t.Errorf("%d restores: the tiers did not compete for the heap as the test means them to", restores)
	}
	for k, tr := range tiers {
		for _, x := range hss[k] {
			must(t, tr.Free(x))
		}
	}
}
