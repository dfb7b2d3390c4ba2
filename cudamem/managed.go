package cudamem

// Managed: unified memory from cuMemAllocManaged. Choose it for memory the driver migrates
// between host and device on demand (a working set larger than the device, steered with
// Prefetch and Advise), or to compare with uvm's explicit tiering; never for pinned buffers
// or device heaps on the copy path. Each region is one allocation, committed whole;
// arena.Options.Capacity is required, since managed memory may oversubscribe the device.

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Managed hands out managed (unified) memory from cuMemAllocManaged, one allocation per region,
// committed whole. The driver migrates its pages between host and device on demand; Prefetch and
// Advise steer it. arena.Options.Capacity is required: managed memory may oversubscribe the device,
// so there is no default.
type Managed struct {
	wholeRegions
}

// NewManaged returns a provider of managed memory attached globally (any stream, any
// device).
func NewManaged(dev *cuda.Device) (*Managed, error) {
	p := &Managed{}
	if err := p.cudaBase.init(dev, "cuda-managed", arena.Managed); err != nil {
		return nil, err
	}
	in := p.dev
	p.wholeRegions.init("cuMemAllocManaged",
		func(n uintptr) (uintptr, error) { return in.MemAllocManaged(n, icuda.MemAttachGlobal) }, in.MemFreeManaged)
	return p, nil
}

// Zero implements arena.Zeroer with cuMemsetD8Async on a stream of its own, synchronized, which
// does not migrate the pages to the host.
func (p *Managed) Zero(addr, size uintptr) error { return p.memset(addr, size) }

// Prefetch queues a migration of [addr, addr+n) to loc (a device's Location, or
// cuda.HostLocation()) on stream s, with the CUDA 12.2+ cuMemPrefetchAsync_v2.
func (p *Managed) Prefetch(addr, n uintptr, loc cuda.Location, s cuda.Stream) error {
	ml, err := memLocation(loc)
	if err != nil {
		return err
	}
	if err := p.dev.MemPrefetchAsync(addr, n, ml, uintptr(s)); err != nil {
		return fmt.Errorf("%w: prefetch %d bytes at %#x to %+v: %w", arena.ErrInvalid, n, addr, loc, err)
	}
	return nil
}

// Advise gives the driver advice about [addr, addr+n) for loc, with the CUDA 12.2+
// cuMemAdvise_v2.
func (p *Managed) Advise(addr, n uintptr, advice cuda.Advice, loc cuda.Location) error {
	ml, err := memLocation(loc)
	if err != nil {
		return err
	}
	if err := p.dev.MemAdvise(addr, n, int32(advice), ml); err != nil {
		return fmt.Errorf("%w: advice %d for %d bytes at %#x: %w", arena.ErrInvalid, advice, n, addr, err)
	}
	return nil
}
