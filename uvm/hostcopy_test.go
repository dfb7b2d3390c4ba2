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

// TestHostCopyOutlivesOverwrite: a device.Heap copy queued from the []byte of AcquireHost, still
// queued after ReleaseHost, reads the bytes the block had then, even when the block is then
// acquired for writing on the device and its new bytes are copied to the host, by an eviction
// or by an AcquireHost: the tier lets go of the buffer such a copy may still read (the pool
// hands it out again once the copy's stream has passed it) and copies the new bytes into
// another. Before, the eviction's copy (and AcquireHost's) wrote the new bytes into the same
// buffer, ahead of the user's copy still queued there, which then carried them.
func TestHostCopyOutlivesOverwrite(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	for _, how := range []string{"Evict", "AcquireHost"} {
		t.Run(how, func(t *testing.T) {
			tr := newTier(t, dev, uvm.Options{DeviceBudget: 4 * size})
			s, s2 := stream(t, dev), stream(t, dev)
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
			must(t, dh.HtoDAsync(d, b, s)) // reads pattern(0), late
			must(t, tr.ReleaseHost(h))
			p, err := tr.Acquire(h, s2, uvm.Write)
			must(t, err)
			writeDev(t, dev, s2, p, pattern(7, size))
			must(t, tr.Release(h, s2))
			switch how {
			case "Evict":
				must(t, tr.Evict([]uvm.Handle{h}))
				must(t, tr.Sync()) // the eviction's copy has run
			case "AcquireHost":
				nb, err := tr.AcquireHost(h, uvm.Read) // waits for its copy to the host
				must(t, err)
				if !bytes.Equal(nb, pattern(7, size)) {
					t.Error("AcquireHost after a write on the device: not the bytes written")
				}
				must(t, tr.ReleaseHost(h))
			}
			f.Hold(false)
			must(t, dev.StreamSynchronize(uintptr(s)))
			got := make([]byte, size)
			must(t, dh.DtoH(got, d))
			if !bytes.Equal(got, pattern(0, size)) {
				t.Errorf("the copy queued from the block's host bytes carried other bytes (the block's new ones: %v)", bytes.Equal(got, pattern(7, size)))
			}
			checkBlocks(t, tr, []uvm.Handle{h}, []byte{7}, size)
			must(t, tr.Free(h))
			must(t, tr.Sync())
			if st := tr.Stats(); st.HostHeldBytes != 0 || st.Pending != 0 {
				t.Errorf("after the Free: %d bytes of host buffers held, %d batches in flight", st.HostHeldBytes, st.Pending)
			}
			must(t, dh.Free(d))
		})
	}
}
