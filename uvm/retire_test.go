package uvm_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestFreeWaitsFailKeepStreamOrder: freeing a block whose eviction copy is still queued on the
// D2H stream retires its host buffer behind that copy. When the waits cannot be queued, the
// tier waits on the CPU instead; it waited for the release events only, so the buffer went
// back to the pool with the copy still queued, and the copy then overwrote the next block
// given that buffer.
func TestFreeWaitsFailKeepStreamOrder(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	const n = 256 << 10
	h, err := tr.Alloc(n)
	must(t, err)
	p, err := tr.Acquire(h, s, uvm.Write)
	must(t, err)
	writeDev(t, dev, s, p, pattern(0xE0, n))
	must(t, tr.Release(h, s))
	f.Hold(true)
	defer f.Complete()
	must(t, tr.Evict([]uvm.Handle{h})) // the copy out is queued, not run
	uvm.FailWaits(errors.New("injected: the waits cannot be queued"))
	err = tr.Free(h)
	uvm.FailWaits(nil)
	must(t, err)
	next, err := tr.Alloc(n)
	must(t, err)
	b, err := tr.AcquireHost(next, uvm.Write)
	must(t, err)
	want := pattern(0x11, n)
	copy(b, want)
	must(t, tr.ReleaseHost(next))
	f.Complete()
	b, err = tr.AcquireHost(next, uvm.Read)
	must(t, err)
	if !bytes.Equal(b, want) {
		t.Errorf("the next block's host bytes changed after the streams ran: %#x at 0, want %#x (the freed block's bytes are %#x)", b[0], want[0], pattern(0xE0, n)[0])
	}
	must(t, tr.ReleaseHost(next))
	must(t, tr.Free(next))
}

// TestDropDeviceCopyFailedFreeKeepsBlock: a block acquired on the host for writing drops its
// device copy; when the waits cannot be queued the tier waits on the CPU and gives the VRAM
// on itself, and when the heap then refuses it (here the heap's double free: the test freed
// the tier's VRAM through the shared heap, the misuse that makes heap.Free fail), the error
// comes back and the block no longer holds that VRAM: it is on the host, with its bytes, and
// its next restore takes VRAM of its own. Before, the block kept pointing to the VRAM it had
// handed on, counted on the device, and a later acquisition handed it to the heap again.
func TestDropDeviceCopyFailedFreeKeepsBlock(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const budget = 1 << 20
	h, err := device.New(public(dev), device.Options{Capacity: 16 << 20, PurgeDelay: -1})
	must(t, err)
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: budget, Heap: h})
	must(t, err)
	s := stream(t, dev)
	acquire := func(hs []uvm.Handle) []cuda.DevicePtr { return acquireAll(t, tr, s, uvm.Read, hs) }
	// Spare VRAM of 256 KiB blocks and the budget's worth of 128 KiB blocks on the device: the
	// tier holds twice its budget, so VRAM it gives up goes back to the heap, not to its spares.
	big := filled(t, tr, 4, 256*kib)
	acquire(big)
	must(t, tr.Evict(big))
	must(t, tr.Sync())
	const n = 128 * kib
	small := filled(t, tr, budget/n, n)
	ps := acquire(small)
	must(t, dev.StreamSynchronize(uintptr(s)))
	if st := tr.Stats(); st.DeviceBytes != budget || st.SpareBytes != budget {
		t.Fatalf("%d bytes on the device, %d spare; want %d of each", st.DeviceBytes, st.SpareBytes, budget)
	}
	must(t, h.Free(ps[0])) // the misuse: the tier's VRAM freed by another hand

	uvm.FailWaits(errors.New("injected: the waits cannot be queued"))
	_, err = tr.AcquireHost(small[0], uvm.Write)
	uvm.FailWaits(nil)
	if !errors.Is(err, heap.ErrDoubleFree) {
		t.Fatalf("AcquireHost for writing, whose VRAM the heap refuses back: %v; want heap.ErrDoubleFree", err)
	}
	st := tr.Stats()
	checkAccounts(t, st)
	must(t, tr.Verify())
	if st.DeviceBytes != budget-n {
		t.Fatalf("after the failed drop: %d bytes on the device, want %d (the block no longer holds the VRAM it gave up)", st.DeviceBytes, budget-n)
	}
	b, err := tr.AcquireHost(small[0], uvm.Write)
	must(t, err)
	if !bytes.Equal(b, pattern(0, n)) {
		t.Fatalf("the block's host bytes after the failed drop: %#x at 0, want %#x", b[0], pattern(0, n)[0])
	}
	must(t, tr.ReleaseHost(small[0]))
	p, err := tr.Acquire(small[0], s, uvm.Read)
	must(t, err)
	must(t, tr.Release(small[0], s))
	if got := readDev(t, dev, s, p, n); !bytes.Equal(got, pattern(0, n)) {
		t.Fatalf("the block restored at %#x: %#x at 0, want %#x", p, got[0], pattern(0, n)[0])
	}
	for _, hd := range append(big, small...) {
		must(t, tr.Free(hd))
	}
	must(t, tr.Close())
	must(t, h.Sync())
	must(t, h.ForgetStream(s))
	must(t, h.Close())
}

// TestDropDeviceCopyFailedWaitKeepsBlock: when the tier cannot queue the waits of a block that
// drops its device copy and cannot wait for them on the CPU either (the context's sticky error,
// left by a kernel that faulted), the VRAM is not given on: the block keeps it and its device
// copy, the error says why, and once the context works the block drops its copy as asked.
func TestDropDeviceCopyFailedWaitKeepsBlock(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr, h, p, s := cleanBlock(t, dev, n)
	before := tr.Stats()

	f.Fault(t, dev)
	uvm.FailWaits(errors.New("injected: the waits cannot be queued"))
	_, err := tr.AcquireHost(h, uvm.Write)
	uvm.FailWaits(nil)
	if code, _ := cuda.ResultCode(err); code != fakecuda.ResultIllegalAddress {
		t.Fatalf("AcquireHost for writing with no wait possible: %v; want the context's error", err)
	}
	f.ClearStickyError()
	if st := tr.Stats(); st.DeviceBytes != before.DeviceBytes || st.HostBytes != before.HostBytes {
		t.Fatalf("after the failed drop: %d bytes on the device, %d on the host only; want %d, %d (the block keeps its VRAM)",
			st.DeviceBytes, st.HostBytes, before.DeviceBytes, before.HostBytes)
	}
	must(t, tr.Verify())
	if q := acquireAll(t, tr, s, uvm.Read, []uvm.Handle{h})[0]; q != p {
		t.Fatalf("the block came back at %#x, not at its VRAM %#x", q, p)
	}
	if got := readDev(t, dev, s, p, n); !bytes.Equal(got, pattern(0, n)) {
		t.Fatalf("the block's device bytes: %#x at 0, want %#x", got[0], pattern(0, n)[0])
	}
	b, err := tr.AcquireHost(h, uvm.Write)
	must(t, err)
	copy(b, pattern(9, n))
	must(t, tr.ReleaseHost(h))
	if st := tr.Stats(); st.DeviceBytes != before.DeviceBytes-n {
		t.Fatalf("after the drop: %d bytes on the device, want %d", st.DeviceBytes, before.DeviceBytes-n)
	}
	must(t, tr.Free(h))
}
