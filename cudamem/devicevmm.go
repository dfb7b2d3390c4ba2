package cudamem

// DeviceVMM: device memory through the CUDA VMM API (vmm.go), the provider NewDevice picks where
// the device has the VMM API (every GPU pinmalloc targets). Choose it for device heaps: regions
// are aligned as asked, and memory goes back to the device granule by granule when the arena
// purges or trims, so other users of the GPU (a framework's caching allocator) get it back.

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
)

// DeviceVMM hands out device memory with the CUDA VMM API: Reserve
// reserves device address space (cuMemAddressReserve, aligned as asked), Commit backs each
// granule of a range with its own physical allocation on the device (cuMemCreate + cuMemMap)
// and makes the range accessible to the device (cuMemSetAccess), Decommit unmaps the range and
// releases its granules, so memory goes back to the device granule by granule.
type DeviceVMM struct {
	vmm
	deviceCapacity
}

// NewDeviceVMM returns a VMM provider on dev. It fails with an error wrapping cuda.ErrNotSupported
// when the device lacks the VMM API.
func NewDeviceVMM(dev *cuda.Device) (*DeviceVMM, error) {
	p := &DeviceVMM{}
	if err := p.cudaBase.init(dev, "cuda-vmm", arena.Device); err != nil {
		return nil, err
	}
	if !p.dev.VMMSupported() {
		return nil, fmt.Errorf("%w: device %d lacks the VMM API: %w", arena.ErrInvalid, p.dev.Ordinal(), pinmalloc.ErrNotSupported)
	}
	if err := p.vmm.init(dev.Location(), []cuda.Location{dev.Location()}, "device"); err != nil {
		return nil, err
	}
	p.capDev = p.dev
	return p, nil
}

// Zero implements arena.Zeroer with cuMemsetD8Async on a stream of its own, synchronized.
func (p *DeviceVMM) Zero(addr, size uintptr) error { return p.memset(addr, size) }
