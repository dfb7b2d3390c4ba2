package cudamem

// HostAlloc: pinned host memory from cuMemHostAlloc. Choose it only to compare with HostVMM and
// HostRegister (bench does): each region is one allocation, committed whole, never decommitted
// and only page-aligned, so an arena over it never gives memory back before Close.

import (
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// HostAlloc hands out pinned host memory from cuMemHostAlloc, one allocation per region: the
// classic way, kept for comparison with HostVMM and HostRegister. Regions are committed whole
// and never decommitted, and their base is only page-aligned.
type HostAlloc struct {
	wholeRegions
}

// NewHostAlloc returns a provider of host memory from cuMemHostAlloc (portable, mapped).
func NewHostAlloc(dev *cuda.Device) (*HostAlloc, error) {
	p := &HostAlloc{}
	if err := p.cudaBase.init(dev, "cuda-hostalloc", arena.HostPinned); err != nil {
		return nil, err
	}
	const flags = icuda.HostAllocPortable | icuda.HostAllocDeviceMap
	in := p.dev
	p.wholeRegions.init("cuMemHostAlloc", func(n uintptr) (uintptr, error) { return in.MemHostAlloc(n, flags) }, in.MemFreeHost)
	return p, nil
}

// Zero implements arena.Zeroer, with the CPU.
func (p *HostAlloc) Zero(addr, size uintptr) error { return hostZero(addr, size) }

// DevicePointer returns the address at which a device sees host address addr, which must lie
// in memory of the provider (cuMemHostGetDevicePointer).
func (p *HostAlloc) DevicePointer(addr uintptr) (cuda.DevicePtr, error) {
	return p.devicePointer(addr)
}
