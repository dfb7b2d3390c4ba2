package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// The tier's own device heap (budget×1.25 + 4 MiB, in 2 MiB segments: 6 MiB for a budget of
// 256 KiB) fills with far fewer bytes than the budget when the blocks are of many size classes:
// each class takes pages of its own (64 KiB for blocks up to 8 KiB, 512 KiB up to 64 KiB, a whole
// segment up to 256 KiB), and small, medium and large pages do not share a segment. The layout
// below leaves 166 KiB of the 256 on the device and every segment taken: five blocks of 8 KiB
// (one small page), four medium blocks of distinct classes (the four pages of a medium segment)
// and one large block (a segment). A block of 9,472 bytes (a fifth medium class) then needs a
// new segment. The tier answered the heap's refusal by evicting its own size of the coldest
// blocks, twice: two small blocks each time, which emptied no page a medium one could use, and
// Prefetch failed with the heap's out of memory (a stress run saw it with three streams and the
// legacy one), where the tier promises to evict cold blocks to make room, and ErrAllPinned only
// once nothing is left to evict. The streams play no part: the tier allocates VRAM on its own H2D
// stream alone, so its heap keeps one stream heap however many streams use the tier.

// fragmentLayout is the sizes of the blocks that fill the heap's segments, coldest first.
var fragmentLayout = []int{8 * kib, 8 * kib, 8 * kib, 8 * kib, 8 * kib, 12288, 13312, 14336, 15360, 72 * kib}

// fragmentBlock is the size of the blocks each stream then needs (the stress run's).
const fragmentBlock = 9472

// fragmentRig makes a tier of a 256 KiB budget with its own device heap and n streams, and puts
// fragmentLayout's blocks on the device, acquired and released in turn on the streams (acquired
// for good, with acquired). It checks the premise: the heap full, the budget far from used.
func fragmentRig(t *testing.T, dev *icuda.Device, n int, acquired bool) (*uvm.Tier, []cuda.Stream, []uvm.Handle) {
	t.Helper()
	const budget = 256 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: budget})
	ss := make([]cuda.Stream, n)
	for i := range ss {
		ss[i] = stream(t, dev)
	}
	var hs []uvm.Handle
	for i, size := range fragmentLayout {
		h, err := tr.Alloc(size)
		must(t, err)
		hs = append(hs, h)
		s := ss[i%n]
		_, err = tr.Acquire(h, s, uvm.Write)
		must(t, err)
		if !acquired {
			must(t, tr.Release(h, s))
		}
	}
	t.Cleanup(func() {
		for i, h := range hs {
			if acquired && i < len(fragmentLayout) {
				must(t, tr.Release(h, ss[i%n]))
			}
			must(t, tr.Free(h))
		}
	})
	must(t, tr.Sync())
	hst, st := tr.HeapStats(), tr.Stats()
	if hst.Arena.Reserved != hst.Arena.Capacity || st.DeviceBytes+fragmentBlock > st.Budget {
		t.Fatalf("premise: the heap has %d of %d bytes reserved and the tier %d of its budget %d on the device; "+
			"want the heap full and room in the budget", hst.Arena.Reserved, hst.Arena.Capacity, st.DeviceBytes, st.Budget)
	}
	return tr, ss, hs
}

// checkOneStreamHeap checks that the tier's heap keeps one stream heap (the H2D stream's), its
// VRAM committed within its capacity, and the tier's device bytes within the budget.
func checkOneStreamHeap(t *testing.T, tr *uvm.Tier, streams int) {
	t.Helper()
	hst, st := tr.HeapStats(), tr.Stats()
	if hst.Streams != 1 {
		t.Errorf("the tier's device heap has %d stream heaps with %d streams using the tier, want 1 (the H2D stream's)",
			hst.Streams, streams)
	}
	if hst.Arena.Committed > hst.Arena.Capacity || st.DeviceBytes > st.Budget {
		t.Errorf("committed %d of the heap's capacity %d, device bytes %d of the budget %d",
			hst.Arena.Committed, hst.Arena.Capacity, st.DeviceBytes, st.Budget)
	}
	checkAccounts(t, st)
}

// fragmentStreams has each of n streams prefetch, acquire and release a new block of
// fragmentBlock bytes on a tier whose heap fragmentLayout filled.
func fragmentStreams(t *testing.T, n int) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, ss, _ := fragmentRig(t, dev, n, false)
	for i, s := range ss {
		h, err := tr.Alloc(fragmentBlock)
		must(t, err)
		if err := tr.Prefetch([]uvm.Handle{h}, s); err != nil {
			st := tr.Stats()
			t.Fatalf("stream %d of %d: Prefetch of a block of %d bytes, %d of the budget %d on the device: %v",
				i+1, n, fragmentBlock, st.DeviceBytes, st.Budget, err)
		}
		p, err := tr.Acquire(h, s, uvm.Write)
		must(t, err)
		b := pattern(byte(i), fragmentBlock)
		writeDev(t, dev, s, p, b)
		if got := readDev(t, dev, s, p, fragmentBlock); string(got) != string(b) {
			t.Fatalf("stream %d: the block's bytes read back differ", i+1)
		}
		must(t, tr.Release(h, s))
		must(t, tr.Free(h))
		checkOneStreamHeap(t, tr, n)
	}
	if out := tr.Stats().Out[uvm.CauseHeapPressure]; out.Blocks == 0 {
		t.Errorf("no block evicted for the heap: the premise (a full heap) did not hold")
	}
	must(t, tr.Verify())
}

// TestFakeFragmentedHeap4Streams: 4 streams each need a block of a new size class on a tier
// whose heap is full of blocks of other classes, its budget half used: each Prefetch evicts cold
// blocks until the heap has room. It failed with the heap's out of memory (capacity exhausted:
// 2097152 bytes asked, 6291456 of 6291456 reserved).
func TestFakeFragmentedHeap4Streams(t *testing.T) { fragmentStreams(t, 4) }

// TestFakeFragmentedHeap8Streams is TestFakeFragmentedHeap4Streams with 8 streams.
func TestFakeFragmentedHeap8Streams(t *testing.T) { fragmentStreams(t, 8) }

// TestFakeFragmentedHeap16Streams is TestFakeFragmentedHeap4Streams with 16 streams.
func TestFakeFragmentedHeap16Streams(t *testing.T) { fragmentStreams(t, 16) }

// TestFakeFragmentedHeapAllAcquired: with the blocks that fill the heap all acquired, nothing can
// be evicted, and a Prefetch that needs a segment fails with ErrAllPinned (AcquireContext waits on
// it), the heap's out of memory in the chain, and leaves the tier as it was.
func TestFakeFragmentedHeapAllAcquired(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, ss, _ := fragmentRig(t, dev, 4, true)
	before := tr.Stats()
	h, err := tr.Alloc(fragmentBlock)
	must(t, err)
	err = tr.Prefetch([]uvm.Handle{h}, ss[0])
	if !errors.Is(err, uvm.ErrAllPinned) || !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Fatalf("Prefetch with every block on the device acquired and the heap full: %v, want ErrAllPinned and the heap's ErrOutOfMemory", err)
	}
	t.Logf("%v", err)
	if st := tr.Stats(); st.DeviceBytes != before.DeviceBytes || st.Out[uvm.CauseHeapPressure].Blocks != 0 {
		t.Errorf("the failed Prefetch moved blocks: device bytes %d -> %d, %d evicted for the heap",
			before.DeviceBytes, st.DeviceBytes, st.Out[uvm.CauseHeapPressure].Blocks)
	}
	checkOneStreamHeap(t, tr, 4)
	must(t, tr.Free(h))
	must(t, tr.Verify())
}
