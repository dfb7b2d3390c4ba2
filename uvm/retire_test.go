package uvm_test

import (
	"bytes"
	"errors"
	"testing"

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
