package uvm_test

import (
	"bytes"
	"testing"

	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestHostCopyOutlivesFree: the []byte of AcquireHost is a buffer of the tier's pool of CUDA
// pinned memory, so a device.Heap copy queued from it records its stream there, and freeing the
// block (which frees the buffer) while that copy is still queued does not hand the buffer to
// the next block: the copy carries the freed block's bytes, not the next one's.
func TestHostCopyOutlivesFree(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size})
	s := stream(t, dev)
	dh, err := device.New(public(dev), device.Options{Capacity: 8 << 20})
	must(t, err)
	defer func() {
		must(t, dh.Sync())
		must(t, dh.ForgetStream(s))
		must(t, dh.Close())
	}()
	d, err := dh.Alloc(size, s)
	must(t, err)
	h := filled(t, tr, 1, size)[0]
	b, err := tr.AcquireHost(h, uvm.Read)
	must(t, err)
	f.Hold(true)
	must(t, dh.HtoDAsync(d, b, s))
	must(t, tr.ReleaseHost(h))
	must(t, tr.Free(h))
	next := allocN(t, tr, 4, size)
	for _, h := range next { // their host buffers are written at once
		nb, err := tr.AcquireHost(h, uvm.Write)
		must(t, err)
		copy(nb, pattern(0xEE, size))
		must(t, tr.ReleaseHost(h))
	}
	f.Hold(false)
	must(t, dev.StreamSynchronize(uintptr(s)))
	got := make([]byte, size)
	must(t, dh.DtoH(got, d))
	if !bytes.Equal(got, pattern(0, size)) {
		t.Fatal("a copy queued from a freed block's host bytes carried another block's bytes")
	}
	for _, h := range next {
		must(t, tr.Free(h))
	}
	must(t, dh.Free(d))
}
