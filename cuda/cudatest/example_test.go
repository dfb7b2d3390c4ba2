package cudatest_test

import (
	"bytes"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// A test of code that uploads to a device heap, run on the fake driver: it needs no GPU, only
// gcc. Written in a _test.go file, it is an ordinary test function:
//
//	func TestUpload(t *testing.T) { ... }
//
// Device runs it again in a child process on the fake; in the test process it returns nil and
// the test returns, reporting the child's result.
func Example() {
	TestUpload := func(t *testing.T) {
		dev, fake := cudatest.Device(t)
		if dev == nil {
			return
		}
		h, err := device.New(dev, device.Options{Capacity: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		s, err := dev.StreamCreate(0)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.StreamDestroy(s)
		defer h.ForgetStream(s)

		p, err := h.Alloc(4096, s)
		if err != nil {
			t.Fatal(err)
		}
		fake.Hold(true) // the GPU is busy: what is queued stays queued
		src := bytes.Repeat([]byte{42}, 4096)
		if err := h.HtoDAsync(p, src, s); err != nil {
			t.Fatal(err)
		}
		fake.CompleteStream(s) // now it has run
		got := make([]byte, 4096)
		if err := h.DtoH(got, p); err != nil || !bytes.Equal(got, src) {
			t.Fatalf("read back %v, %v", got[:4], err)
		}
		if err := h.FreeAsync(p, s); err != nil {
			t.Fatal(err)
		}
	}
	_ = TestUpload
}

// A test that a program survives a CUDA call that fails: here the point a device heap
// records for a free made on another stream. The heap answers a record it cannot make with a
// synchronize of the context, and the free is done.
func ExampleFake_FailNext() {
	TestRecordFails := func(t *testing.T) {
		dev, fake := cudatest.Device(t)
		if dev == nil {
			return
		}
		h, err := device.New(dev, device.Options{Capacity: 8 << 20})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		p, err := h.Alloc(4096, 0)
		if err != nil {
			t.Fatal(err)
		}
		s, err := dev.StreamCreate(0)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.StreamDestroy(s)
		defer h.ForgetStream(s)
		fake.Hold(true) // the GPU is busy: a copy stays queued on s
		defer fake.Complete()
		if err := h.HtoDAsync(p, make([]byte, 4096), s); err != nil {
			t.Fatal(err)
		}
		if err := h.FreeAsync(p, s); err != nil { // another stream's block: the free waits for s
			t.Fatal(err)
		}
		fake.FailNext(cudatest.EventRecord, cudatest.InvalidValue)
		q, err := h.Alloc(4096, s) // its poll cannot record a point on s
		if err != nil {
			t.Fatal(err)
		}
		defer h.Free(q)
		if st := h.Stats(); st.Frees != 1 {
			t.Fatalf("%d frees done, want 1", st.Frees)
		}
	}
	_ = TestRecordFails
}

// A test that a pinned pool keeps its memory when the driver refuses to give it back: on a
// driver without VMM host memory the pool pins by registration, and the unregistration of the
// memory it populated at its first Alloc is refused at Close. Close reports it, the memory
// stays the pool's, and the next Close gives it back.
func ExampleFake_SetHostVMM() {
	TestCloseRefused := func(t *testing.T) {
		dev, fake := cudatest.Device(t)
		if dev == nil {
			return
		}
		fake.SetHostVMM(false) // a driver before CUDA 12.2: pools register their memory
		p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 16 << 20,
			Populate: true, PurgeDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.Alloc(1 << 20) // the pool reserves, pins and populates its first region
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Free(b); err != nil { // the memory stays the pool's (PurgeDelay -1)
			t.Fatal(err)
		}
		fake.FailNext(cudatest.HostUnregister, cudatest.NotPermitted)
		if err := p.Close(); err == nil {
			t.Fatal("Close whose unregistration is refused succeeded")
		}
		if p.Stats().Committed == 0 {
			t.Fatal("the memory the driver refused to unpin is gone from the pool's account")
		}
		if err := p.Close(); err != nil { // gives it back
			t.Fatal(err)
		}
	}
	_ = TestCloseRefused
}
