package cudamem

// Managed: unified memory from cuMemAllocManaged. Choose it for memory the driver migrates
// between host and device on demand (a working set larger than the device, steered with
// Prefetch and Advise), or to compare with uvm's explicit tiering; never for pinned buffers
// or device heaps on the copy path. Each region is one allocation, committed whole;
// arena.Options.Capacity is required, since managed memory may oversubscribe the device.

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
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
// cuda.HostLocation()) on stream s, with the CUDA 12.2+ cuMemPrefetchAsync_v2. A range,
// location or stream the driver refuses is refused with arena.ErrInvalid; the driver's refusal
// of a correct one (its sticky error after a fault, a capture) wraps pinmalloc.ErrRefused, and
// arena.ErrExhausted too when the driver is out of memory; either wraps the driver's error.
func (p *Managed) Prefetch(addr, n uintptr, loc cuda.Location, s cuda.Stream) error {
	ml, err := memLocation(loc)
	if err != nil {
		return err
	}
	if err := p.dev.MemPrefetchAsync(addr, n, ml, uintptr(s)); err != nil {
		return hintError(fmt.Sprintf("prefetch %d bytes at %#x to %+v", n, addr, loc), err)
	}
	return nil
}

// Advise gives the driver advice about [addr, addr+n) for loc, with the CUDA 12.2+
// cuMemAdvise_v2. Its errors are as Prefetch's.
func (p *Managed) Advise(addr, n uintptr, advice cuda.Advice, loc cuda.Location) error {
	ml, err := memLocation(loc)
	if err != nil {
		return err
	}
	if err := p.dev.MemAdvise(addr, n, int32(advice), ml); err != nil {
		return hintError(fmt.Sprintf("advice %d for %d bytes at %#x", advice, n, addr), err)
	}
	return nil
}

// hintError is the error of a Prefetch or Advise that the driver refused (err), what saying
// which: one wrapping arena.ErrInvalid where the driver refuses an argument (an invalid value,
// a stream or device it does not know: the caller's mistake), else the driver's refusal of
// work asked correctly (refusedError: pinmalloc.ErrRefused, with arena.ErrExhausted when the
// driver is out of memory), such as its sticky error after a fault, or a capture's.
func hintError(what string, err error) error {
	if errors.Is(err, pinmalloc.ErrInvalidValue) || errors.Is(err, pinmalloc.ErrInvalidHandle) ||
		errors.Is(err, pinmalloc.ErrNoDevice) {
		return fmt.Errorf("%w: %s: %w", arena.ErrInvalid, what, err)
	}
	return refusedError(pinmalloc.ErrRefused, what, err)
}
