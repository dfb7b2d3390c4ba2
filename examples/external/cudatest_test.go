package main

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// Tests of a program's own GPU code on the fake driver, from a module outside pinmalloc, through
// public names only: what a user's CI without a GPU runs.

// TestDeviceStreamOrder: work queued on a stream has not run until the stream has passed it. A
// read that does not wait for the stream (a synchronous copy runs on the legacy stream, which a
// non-blocking stream does not order) sees the old bytes, as it may on a GPU; after the stream
// has run, the new ones.
func TestDeviceStreamOrder(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	h, err := device.New(dev, device.Options{Capacity: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(s)
	defer h.ForgetStream(s)

	const n = 64 << 10
	p, err := h.Alloc(n, s)
	if err != nil {
		t.Fatal(err)
	}
	fake.Hold(true) // the GPU is busy: work queued stays queued
	if err := h.MemsetAsync(p, 1, n, s); err != nil {
		t.Fatal(err)
	}
	if err := dev.StreamQuery(s); !errors.Is(err, cuda.ErrNotReady) {
		t.Fatalf("StreamQuery of a stream with held work = %v; want cuda.ErrNotReady", err)
	}
	got := make([]byte, n)
	if err := h.DtoH(got, p); err != nil {
		t.Fatal(err)
	}
	if got[0] != 0 {
		t.Errorf("read before the stream ran: %d; want the old byte 0", got[0])
	}
	if err := dev.StreamSynchronize(s); err != nil { // waits for the memset, as on a GPU
		t.Fatal(err)
	}
	if err := h.DtoH(got, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{1}, n)) {
		t.Error("read after StreamSynchronize: the memset's bytes are not there")
	}
	if err := h.FreeAsync(p, s); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceOutOfMemory: a device with 16 MiB refuses a heap's growth past it, with the error a
// program matches.
func TestDeviceOutOfMemory(t *testing.T) {
	dev, fake := cudatest.Device(t)
	if dev == nil {
		return
	}
	fake.SetMemory(16 << 20)
	h, err := device.New(dev, device.Options{Capacity: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	p, err := h.Alloc(12<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Free(p)
	if _, err := h.Alloc(8<<20, 0); !errors.Is(err, cuda.ErrOutOfMemory) || !errors.Is(err, device.ErrOutOfMemory) {
		t.Errorf("Alloc past the device's memory = %v; want cuda.ErrOutOfMemory", err)
	}
}

// TestTier: a uvm tier with a 4 MiB budget holds 16 MiB of blocks; each comes back from the host
// with the bytes written into it.
func TestTier(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	tier, err := uvm.New(dev, uvm.Options{DeviceBudget: 4 << 20, HostCapacity: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tier.Close()
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(s)
	defer tier.ForgetStream(s)

	const n, size = 16, 1 << 20
	blocks := make([]uvm.Handle, n)
	for i := range blocks {
		if blocks[i], err = tier.Alloc(size); err != nil {
			t.Fatal(err)
		}
		buf, err := tier.AcquireHost(blocks[i], uvm.Write)
		if err != nil {
			t.Fatal(err)
		}
		for j := range buf {
			buf[j] = byte(i)
		}
		if err := tier.ReleaseHost(blocks[i]); err != nil {
			t.Fatal(err)
		}
	}
	for round := 0; round < 2; round++ { // every block goes to the device and back at least once
		for i, b := range blocks {
			p, err := tier.Acquire(b, s, uvm.Write)
			if err != nil {
				t.Fatal(err)
			}
			if err := dev.StreamSynchronize(s); err != nil {
				t.Fatal(err)
			}
			_ = p // a kernel on s would read and write the block here
			if err := tier.Release(b, s); err != nil {
				t.Fatal(err)
			}
			buf, err := tier.AcquireHost(b, uvm.Read)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf, bytes.Repeat([]byte{byte(i)}, size)) {
				t.Fatalf("round %d: block %d does not hold its bytes", round, i)
			}
			if err := tier.ReleaseHost(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := tier.Stats()
	if st.DeviceBytes > 4<<20 {
		t.Errorf("the tier holds %d bytes of VRAM, above its 4 MiB budget", st.DeviceBytes)
	}
	if st.HitRate() == 1 {
		t.Error("no block was ever migrated")
	}
	for _, b := range blocks {
		if err := tier.Free(b); err != nil {
			t.Fatal(err)
		}
	}
}
