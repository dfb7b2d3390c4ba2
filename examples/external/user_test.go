package main

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cuda/cudatest"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/pinned"
)

func TestHost(t *testing.T) {
	if err := hostDemo(); err != nil {
		t.Fatal(err)
	}
}

// TestErrors matches errors from outside the module with the public sentinels.
func TestErrors(t *testing.T) {
	if _, err := pinned.New(pinned.Options{Capacity: -1}); !errors.Is(err, pinned.ErrInvalidOptions) {
		t.Errorf("pinned.New with a negative capacity = %v; want pinned.ErrInvalidOptions", err)
	}
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h, err := heap.New(a, heap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Bytes(0x1000); !errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("heap Bytes of a foreign address = %v; want heap.ErrNotOwned", err)
	}
	if _, err := a.Bytes(0x1000, 1); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("arena Bytes of a foreign address = %v; want arena.ErrInvalid", err)
	}
	if err := errors.Join(h.Close(), a.Close()); err != nil {
		t.Fatal(err)
	}
	if _, err := device.New(nil, device.Options{}); !errors.Is(err, cuda.ErrNoDriver) || !errors.Is(err, device.ErrNoDriver) {
		t.Errorf("device.New(nil) = %v; want cuda.ErrNoDriver (the same value as device.ErrNoDriver)", err)
	}
	if _, err := cudamem.NewDeviceVMM(&cuda.Device{}); !errors.Is(err, arena.ErrInvalid) {
		t.Errorf("cudamem.NewDeviceVMM of a zero Device = %v; want arena.ErrInvalid", err)
	}
	var d *cuda.Device
	if _, err := d.StreamCreate(cuda.StreamDefault); !errors.Is(err, cuda.ErrNoDriver) {
		t.Errorf("StreamCreate on a nil Device = %v; want cuda.ErrNoDriver", err)
	}
}

// TestGPU runs the GPU part on device 0: the real driver when there is one, the fake when
// TestGPUOnFakeDriver runs the GPU part on pinmalloc's fake CUDA driver through the public
// package cuda/cudatest: no GPU needed, only gcc.
func TestGPUOnFakeDriver(t *testing.T) {
	dev, _ := cudatest.Device(t)
	if dev == nil {
		return
	}
	report, err := gpuDemo(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(report)
}
