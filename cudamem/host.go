package cudamem

// CUDA pinned host memory. NewHost gives the best provider the driver offers:
//
//   - HostVMM, VMM host memory (CUDA 12.2+ with host NUMA support, or CUDA 13's host
//     location): one reserved address range per region, each 2 MiB granule its own physical
//     allocation (cuMemCreate at a host location), mapped and granted to the host and to every
//     device the pool serves. Consecutive mapped granules are one DMA range, so any block, of
//     any size, copies in one call at full bandwidth, and granules still commit and decommit
//     one by one.
//   - HostRegister (hostregister.go), mmap + cuMemHostRegister, where the driver has no VMM
//     host memory, under the registration invariant stated there.
//
// HostAlloc (cuMemHostAlloc, one allocation per region) is kept for comparison.

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
)

// HostOptions configures the CUDA pinned host providers.
type HostOptions struct {
	// HostOptions applies to the registration provider's mappings (HugePages, Populate; its
	// Node is replaced by NUMA); with Populate the VMM provider too commits each region whole
	// when it is reserved.
	arena.HostOptions
	// Devices lists the ordinals of other devices that may read and write VMM host memory
	// (copies and zero-copy kernels): the device the provider is made on always may. A
	// registration is portable to every device without it.
	Devices []int
	// NUMA selects the host NUMA node of the memory, on either path (node.go):
	// arena.NUMANearest (the default) the node nearest the device (DeviceNode),
	// arena.NUMANode(n) node n. VMM host memory is created there; registered memory is bound
	// there before it is touched.
	NUMA arena.NUMA
}

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
		p.owned = true
	case *HostRegister:
		p.owned = true
	}
	return p, nil
}
