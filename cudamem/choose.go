package cudamem

// Choosing a provider: NewHost and OpenHost give the best provider of pinned host memory the
// driver offers, NewDevice the best provider of device memory.
//
// Pinned host memory:
//
//   - HostVMM (hostvmm.go), VMM host memory (CUDA 12.2+ with host NUMA support, or CUDA
//     13's host location): one reserved address range per region, each 2 MiB granule its own
//     physical allocation (cuMemCreate at a host location), mapped and granted to the host and
//     to every device the pool serves. Consecutive mapped granules are one DMA range, so any
//     block, of any size, copies in one call at full bandwidth, and granules still commit and
//     decommit one by one.
//   - HostRegister (hostregister.go), mmap + cuMemHostRegister, where the driver has no VMM
//     host memory, under the registration invariant stated there.
//
// HostAlloc (cuMemHostAlloc, one allocation per region) is kept for comparison.
//
// Device memory: DeviceVMM (devicevmm.go) where the device has the VMM API, which commits and
// decommits granule by granule, else DeviceMalloc (devicemalloc.go), one cuMemAlloc per
// region. Managed memory (managed.go) is never chosen for you.

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
)

// NewHost returns the best provider of pinned host memory dev offers: VMM host memory where
// the driver supports it (HostVMM), else registered memory (HostRegister). Either one hands out
// memory any block of which a device copies in one call.
func NewHost(dev *cuda.Device, o HostOptions) (arena.Provider, error) {
	in, err := internalDevice(dev, "cuda-host")
	if err != nil {
		return nil, err
	}
	if host, numa := in.HostVMMSupported(); host || numa {
		return NewHostVMM(dev, o)
	}
	return NewHostRegister(dev, o)
}

// OpenHost opens CUDA device ordinal and returns NewHost's provider on it, which owns the
// device: its Close method (io.Closer) gives the device back once every arena over it is
// closed. Without a driver the error wraps cuda.ErrNoDriver.
func OpenHost(ordinal int, o HostOptions) (arena.Provider, error) {
	dev, err := cuda.Open(ordinal)
	if err != nil {
		return nil, fmt.Errorf("%w: CUDA device %d: %w", arena.ErrReserve, ordinal, err)
	}
	p, err := NewHost(dev, o)
	if err != nil {
		_ = dev.Close()
		return nil, err
	}
	switch p := p.(type) {
	case *HostVMM:
		p.owned.Store(true)
	case *HostRegister:
		p.owned.Store(true)
	}
	return p, nil
}

// NewDevice returns the best provider of device memory dev offers: the VMM provider
// (commit and decommit by granule) where the VMM API is supported, else the cuMemAlloc one.
func NewDevice(dev *cuda.Device) (arena.Provider, error) {
	in, err := internalDevice(dev, "device")
	if err != nil {
		return nil, err
	}
	if in.VMMSupported() {
		return NewDeviceVMM(dev)
	}
	return NewDeviceMalloc(dev)
}
