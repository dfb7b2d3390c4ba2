package uvm_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestNewRefusesForeignHeapAndPool: New refuses, with ErrInvalidOptions and nothing left made,
// a device heap of another device and a host pool whose memory the device cannot copy
// asynchronously (Pageable); it takes a CUDAHost pool of another device that grants the tier's
// device access. Before, New took both: the tier's copies on device 0 moved blocks into the
// other device's VRAM, or between VRAM and pageable memory its copy kernel cannot read (on a
// GPU, a fault that ends the context), and the first eviction or restore was where it failed.
func TestNewRefusesForeignHeapAndPool(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d1, err := cuda.Open(1)
	must(t, err)
	defer func() { must(t, d1.Close()) }()
	h1, err := device.New(d1, device.Options{Capacity: 8 << 20})
	must(t, err)
	defer func() { must(t, h1.Close()) }()
	p1, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Device: 1, Devices: []int{0},
		Capacity: 8 << 20})
	must(t, err)
	defer func() { must(t, p1.Close()) }()
	pp, err := pinned.New(pinned.Options{Backend: pinned.Pageable, Capacity: 8 << 20})
	must(t, err)
	defer func() { must(t, pp.Close()) }()
	live := f.LiveObjects()
	for _, c := range []struct {
		what string
		o    uvm.Options
	}{
		{"a heap of device 1", uvm.Options{Heap: h1}},
		{"a Pageable pool", uvm.Options{HostPool: pp}},
	} {
		c.o.DeviceBudget = 1 << 20
		tr, err := uvm.New(public(dev), c.o)
		if !errors.Is(err, uvm.ErrInvalidOptions) {
			t.Errorf("New on device 0 with %s: %v, want ErrInvalidOptions", c.what, err)
		}
		if tr != nil {
			must(t, tr.Close())
		}
		if got := f.LiveObjects(); got["streams"] != live["streams"] || got["events"] != live["events"] {
			t.Errorf("New with %s left driver objects: %v, before %v", c.what, got, live)
		}
	}
	// A pool of device 1 whose memory device 0 may copy (pinned.NewNodes makes such pools).
	tr, err := uvm.New(public(dev), uvm.Options{DeviceBudget: 1 << 20, HostPool: p1})
	must(t, err)
	must(t, tr.Close())
}
