package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestUndoneRestoreSaysHeapRefusal: a restore whose copy fails, and whose batch event cannot be
// recorded either, gives its VRAM back after a synchronize of the H2D stream (undoRestore). With
// the spare VRAM full, that VRAM goes back to the device heap, which refuses it here: a heap
// with ZeroOnFree clears a block on the legacy stream, which a blocking stream's capture holds
// (the block stays live in the heap). The Acquire says so (pinmalloc.ErrCapturing in its
// error, besides the copy's), and the tier keeps the block as spare VRAM rather than lose it:
// its Close gives it back, and the heap closes with nothing live. Before, the heap's refusal
// was dropped and the block was lost to the tier, live in the heap for good.
func TestUndoneRestoreSaysHeapRefusal(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, m, heap, s := fullSpares(t, dev)
	e := filled(t, tr, 1, 3*spareUnit)[0]
	var aerr error
	duringBlockingCapture(t, dev, func() {
		m.fail = true
		// The batch's event, after the copy's own.
		f.FailAfter(fakecuda.CallRecord, 1, fakecuda.ResultInvalidValue)
		_, aerr = tr.Acquire(e, s, uvm.Read)
	})
	checkKeptRefused(t, tr, heap, aerr)
}

// TestAbortedRestoreSaysHeapRefusal: as TestUndoneRestoreSaysHeapRefusal, for a restore that
// fails before any copy was queued (a Prefetch whose second chunk of handles holds a freed
// one, the first chunk's block given VRAM already), whose VRAM goes back at once (abortRestore).
// Before, the heap's refusal was dropped there too, and the block lost; the tier also counted
// the block's bytes twice when it chose between keeping the VRAM and giving it back.
func TestAbortedRestoreSaysHeapRefusal(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, _, heap, s := fullSpares(t, dev)
	e := filled(t, tr, 1, 3*spareUnit)[0]
	gone, err := tr.Alloc(spareUnit)
	must(t, err)
	must(t, tr.Free(gone))
	hs := make([]uvm.Handle, 0, 256)
	for range cap(hs) - 1 { // the first chunk: e, again and again
		hs = append(hs, e)
	}
	hs = append(hs, gone)
	var perr error
	duringBlockingCapture(t, dev, func() { perr = tr.Prefetch(hs, s) })
	if !errors.Is(perr, uvm.ErrInvalidHandle) {
		t.Errorf("Prefetch of a freed handle: %v; want uvm.ErrInvalidHandle", perr)
	}
	checkKeptRefused(t, tr, heap, perr)
}

// TestAbortedRestoreKeepsSpare: the VRAM of a restore that fails before any copy was queued
// becomes spare VRAM when the device bytes and the spare bytes stay within twice the budget
// without it. Before, abortRestore asked while the block's bytes still counted as on the
// device, so they counted twice, and VRAM the bound had room for went back to the heap.
func TestAbortedRestoreKeepsSpare(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const u = spareUnit
	tr, _, _, s := spares(t, dev, 1) // 4u of spare VRAM, a budget of 4u
	e := filled(t, tr, 1, 3*u)[0]
	gone, err := tr.Alloc(u)
	must(t, err)
	must(t, tr.Free(gone))
	hs := make([]uvm.Handle, 0, 256)
	for range cap(hs) - 1 {
		hs = append(hs, e)
	}
	if err := tr.Prefetch(append(hs, gone), s); !errors.Is(err, uvm.ErrInvalidHandle) {
		t.Fatalf("Prefetch of a freed handle: %v; want uvm.ErrInvalidHandle", err)
	}
	if st := tr.Stats(); st.SpareBytes != 7*u {
		t.Errorf("after the failed restore: %d bytes of spare VRAM, want %d (4 + 3 units, within 8)",
			st.SpareBytes, 7*u)
	}
}

// spareUnit is the size of fullSpares' smallest blocks; its tier's budget is 4 of them.
const spareUnit = 64 * kib

// fullSpares makes a tier of a budget of 4 spareUnits on a device heap with ZeroOnFree, whose
// copies go through a partMover, with spare VRAM of twice the budget: four blocks of spareUnit
// and two of twice that, each restored on stream s and dropped.
func fullSpares(t *testing.T, dev *icuda.Device) (
	*uvm.Tier, *partMover, *device.Heap, cuda.Stream) {
	t.Helper()
	return spares(t, dev, 1, 2)
}

// spares makes fullSpares' tier with the spare VRAM of its blocks of spareUnit times each of
// units.
func spares(t *testing.T, dev *icuda.Device, units ...int) (
	*uvm.Tier, *partMover, *device.Heap, cuda.Stream) {
	t.Helper()
	const u = spareUnit
	o := device.Options{Capacity: 8 << 20, ZeroOnFree: true, PurgeDelay: -1}
	heap, err := device.New(public(dev), o)
	must(t, err)
	t.Cleanup(func() { must(t, heap.Close()) }) // after the tier's Close, registered later
	m := &partMover{next: kernelMover(t, dev)}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * u, Heap: heap, Mover: m})
	s := stream(t, dev)
	for _, k := range units {
		hs := filled(t, tr, 4/k, k*u)
		acquireAll(t, tr, s, uvm.Read, hs)
		must(t, tr.Evict(hs))
		must(t, tr.Sync())
	}
	if st, want := tr.Stats(), uint64(len(units)*4*u); st.SpareBytes != want {
		t.Fatalf("%d bytes of spare VRAM, want %d", st.SpareBytes, want)
	}
	return tr, m, heap, s
}

// duringBlockingCapture runs f on another goroutine while a blocking stream captures a CUDA
// graph, which holds the legacy stream, where a device heap with ZeroOnFree clears the blocks
// freed to it: the heap refuses those frees (the block stays live).
func duringBlockingCapture(t *testing.T, dev *icuda.Device, f func()) {
	t.Helper()
	capt, err := dev.StreamCreate(false)
	must(t, err)
	t.Cleanup(func() { must(t, dev.StreamDestroy(capt)) })
	beginCapture(t, dev, cuda.Stream(capt))
	elsewhere(f)
	endCapture(t, dev, cuda.Stream(capt))
}

// checkKeptRefused checks that err, a failed restore's, says the heap's refusal of its block
// of 3 spareUnits, that the tier kept the block as spare VRAM, and that the tier's Close gives
// it back to the heap.
func checkKeptRefused(t *testing.T, tr *uvm.Tier, heap *device.Heap, aerr error) {
	t.Helper()
	const u = spareUnit
	if aerr == nil || !errors.Is(aerr, pinmalloc.ErrCapturing) {
		t.Errorf("the failed restore, the heap refusing its VRAM back: %v; "+
			"want the heap's refusal (pinmalloc.ErrCapturing) in the error", aerr)
	}
	must(t, tr.Verify())
	if st := tr.Stats(); st.DeviceBytes != 0 || st.SpareBytes != 8*u+3*u {
		t.Errorf("after the failed restore: %d bytes on the device, %d spare; want 0, %d",
			st.DeviceBytes, st.SpareBytes, 8*u+3*u)
	}
	must(t, tr.Close())
	if live := heap.Stats().Live; live != 0 {
		t.Errorf("the heap after the tier's Close: %d blocks live, want 0", live)
	}
}

// TestFlushRefusedKeepsSpare: spare VRAM given back to the device heap (MakeRoom, the pressure
// hook, an allocation the heap refused) that the heap refuses (ZeroOnFree while a blocking
// stream captures a CUDA graph: the blocks stay live there) stays the tier's spare VRAM, and
// the refusal is said: the tier gives it back once the heap takes it (here, its Close). Before,
// the tier dropped every spare block whether the heap took it or not: the refused ones were
// lost, live in the heap for good, and the pressure hook said nothing of it.
func TestFlushRefusedKeepsSpare(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const u = spareUnit
	tr, _, heap, _ := spares(t, dev, 1) // 4u of spare VRAM
	var err error
	duringBlockingCapture(t, dev, func() { err = tr.MakeRoom(u) })
	if !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Errorf("MakeRoom, the heap refusing the spare VRAM: %v; want pinmalloc.ErrCapturing", err)
	}
	must(t, tr.Verify())
	if st := tr.Stats(); st.SpareBytes != 4*u {
		t.Errorf("after the refused give-back: %d bytes of spare VRAM, want %d", st.SpareBytes, 4*u)
	}
	must(t, tr.Close())
	if live := heap.Stats().Live; live != 0 {
		t.Errorf("the heap after the tier's Close: %d blocks live, want 0", live)
	}
}

// TestCloseKeepsRefusedSpare: a Close while the device heap refuses the tier's spare VRAM back
// (ZeroOnFree while a blocking stream captures a CUDA graph: the blocks stay live in the heap)
// keeps that VRAM, with what the tier needs to give it back, says so (ErrHeldBack, with the
// heap's refusal), and a later Close gives it back. Before, Close finished and dropped the
// refused blocks: they stayed live in the heap for good, and a later Close said ErrClosed.
func TestCloseKeepsRefusedSpare(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr, _, heap, _ := spares(t, dev, 1) // 4 spareUnits of spare VRAM
	var err error
	duringBlockingCapture(t, dev, func() { err = tr.Close() })
	if !errors.Is(err, uvm.ErrHeldBack) || !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Errorf("Close, the heap refusing the spare VRAM: %v; want uvm.ErrHeldBack and the "+
			"heap's refusal (pinmalloc.ErrCapturing)", err)
	}
	must(t, tr.Close())
	if live := heap.Stats().Live; live != 0 {
		t.Errorf("the heap after the tier's second Close: %d blocks live, want 0", live)
	}
}
