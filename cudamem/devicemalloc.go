package cudamem

// DeviceMalloc: device memory from cuMemAlloc. Choose it only for a device without the VMM API
// (NewDevice falls back to it there) or to compare: each region is one allocation, committed
// whole and given back only when the arena closes.

import (
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
)

// DeviceMalloc hands out device memory from cuMemAlloc, one allocation per region, for
// devices without the VMM API. Regions are committed whole and never decommitted; their base is
// only 256-byte aligned, which the arena's base-relative chunk grid absorbs.
type DeviceMalloc struct {
	wholeRegions
	deviceCapacity
}

// NewDeviceMalloc returns a provider of device memory from cuMemAlloc.
func NewDeviceMalloc(dev *cuda.Device) (*DeviceMalloc, error) {
	p := &DeviceMalloc{}
	if err := p.cudaBase.init(dev, "cuda-malloc", arena.Device); err != nil {
		return nil, err
	}
	p.wholeRegions.init("cuMemAlloc", p.dev.MemAlloc, p.dev.MemFree)
	p.capDev = p.dev
	return p, nil
}

// Zero implements arena.Zeroer with cuMemsetD8Async on a stream of its own, synchronized.
func (p *DeviceMalloc) Zero(addr, size uintptr) error { return p.memset(addr, size) }
