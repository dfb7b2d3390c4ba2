package cudamem

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/align"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// DefaultDeviceShare is the share of a device's free memory that DefaultDeviceCapacity gives
// an arena, in percent.
const DefaultDeviceShare = 90

// DefaultDeviceCapacity is the capacity of a device arena whose arena.Options.Capacity is zero:
// DefaultDeviceShare percent of the memory free on dev now, rounded down to the device's
// allocation granularity (2 MiB on an H100). Each device of a multi-GPU machine gets its own
// provider and arena, sized by its own free memory.
func DefaultDeviceCapacity(dev *cuda.Device) (uintptr, error) {
	in, err := internalDevice(dev, "device")
	if err != nil {
		return 0, err
	}
	return defaultDeviceCapacity(in)
}

// defaultDeviceCapacity is DefaultDeviceCapacity of the device inside the public one.
func defaultDeviceCapacity(dev *icuda.Device) (uintptr, error) {
	free, _, err := dev.MemGetInfo()
	if err != nil {
		return 0, fmt.Errorf("%w: free memory of device %d: %w", arena.ErrReserve, dev.Ordinal(), err)
	}
	g := deviceGranule(dev)
	c := capacityFromFree(free, g)
	if c == 0 {
		return 0, fmt.Errorf("%w: device %d has %d bytes free, less than one %d-byte granule for an arena",
			arena.ErrCapacity, dev.Ordinal(), free, g)
	}
	return c, nil
}

// capacityFromFree is DefaultDeviceShare percent of free, rounded down to granule g.
func capacityFromFree(free, g uintptr) uintptr { return free / 100 * DefaultDeviceShare / g * g }

// deviceGranule is the VMM allocation granularity when the device has the VMM API, else the
// default chunk size.
func deviceGranule(dev *icuda.Device) uintptr {
	if dev.VMMSupported() {
		if g, _, err := dev.MemGetAllocationGranularity(); err == nil && align.IsPow2(g) {
			return g
		}
	}
	return arena.DefaultChunkSize
}

// deviceCapacity gives the device providers their DefaultCapacity method.
type deviceCapacity struct{ capDev *icuda.Device }

// DefaultCapacity is DefaultDeviceCapacity, computed when asked (an arena asks once, at arena.New,
// when arena.Options.Capacity is zero); 0 when it cannot be found. It is a default, not a cap: an
// arena may be given more.
func (c deviceCapacity) DefaultCapacity() uintptr {
	n, _ := defaultDeviceCapacity(c.capDev)
	return n
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

// CUDA device memory through the virtual memory management API.

// DeviceVMM hands out device memory with the CUDA VMM API (vmm.go): Reserve
// reserves device address space (cuMemAddressReserve, aligned as asked), Commit backs each
// granule of a range with its own physical allocation on the device (cuMemCreate + cuMemMap)
// and makes the range accessible to the device (cuMemSetAccess), Decommit unmaps the range and
// releases its granules, so memory goes back to the device granule by granule.
type DeviceVMM struct {
	*vmm
	deviceCapacity
}

// NewDeviceVMM returns a VMM provider on dev. It fails with an error wrapping cuda.ErrNotSupported
// when the device lacks the VMM API.
func NewDeviceVMM(dev *cuda.Device) (*DeviceVMM, error) {
	b, err := newCUDABase(dev, "cuda-vmm", arena.Device)
	if err != nil {
		return nil, err
	}
	if !b.dev.VMMSupported() {
		return nil, fmt.Errorf("%w: device %d lacks the VMM API: %w", arena.ErrInvalid, b.dev.Ordinal(), icuda.ErrNotSupported)
	}
	v, err := newVMM(b, dev.Location(), []cuda.Location{dev.Location()}, "device")
	if err != nil {
		return nil, err
	}
	return &DeviceVMM{vmm: v, deviceCapacity: deviceCapacity{b.dev}}, nil
}

// Zero implements arena.Zeroer with cuMemsetD8.
func (p *DeviceVMM) Zero(addr, size uintptr) error { return p.memset(addr, size) }

// memset clears device-accessible memory with the driver, and waits for it: a cuMemsetD8 of
// device memory returns before it has run, queued on the legacy default stream, which work on
// non-blocking streams does not wait for (the driver API's "API synchronization behavior"), so
// the next user of the memory could write it before the memset clears it.
func (b *cudaBase) memset(addr, size uintptr) error {
	if err := b.dev.MemsetD8(addr, 0, size); err != nil {
		return fmt.Errorf("%w: cuMemsetD8 of %d bytes at %#x: %w", arena.ErrInvalid, size, addr, err)
	}
	if err := b.dev.StreamSynchronize(0); err != nil {
		return fmt.Errorf("%w: waiting for cuMemsetD8 of %d bytes at %#x: %w", arena.ErrInvalid, size, addr, err)
	}
	return nil
}

// CUDA device memory from cuMemAlloc.

// DeviceMalloc hands out device memory from cuMemAlloc, one allocation per region, for
// devices without the VMM API. Regions are committed whole and never decommitted; their base is
// only 256-byte aligned, which the arena's base-relative chunk grid absorbs.
type DeviceMalloc struct {
	wholeRegions
	deviceCapacity
}

// NewDeviceMalloc returns a provider of device memory from cuMemAlloc.
func NewDeviceMalloc(dev *cuda.Device) (*DeviceMalloc, error) {
	b, err := newCUDABase(dev, "cuda-malloc", arena.Device)
	if err != nil {
		return nil, err
	}
	w := newWholeRegions(b, "cuMemAlloc", b.dev.MemAlloc, b.dev.MemFree)
	return &DeviceMalloc{w, deviceCapacity{b.dev}}, nil
}

// Zero implements arena.Zeroer with cuMemsetD8.
func (p *DeviceMalloc) Zero(addr, size uintptr) error { return p.memset(addr, size) }

// CUDA managed memory.

// Managed hands out managed (unified) memory from cuMemAllocManaged, one
// allocation per region, committed whole. The driver migrates its pages between host and
// device on demand; Prefetch and Advise steer it. arena.Options.Capacity is required: managed memory
// may oversubscribe the device, so there is no default.
type Managed struct {
	wholeRegions
}

// NewManaged returns a provider of managed memory attached globally (any stream, any
// device).
func NewManaged(dev *cuda.Device) (*Managed, error) {
	b, err := newCUDABase(dev, "cuda-managed", arena.Managed)
	if err != nil {
		return nil, err
	}
	in := b.dev
	w := newWholeRegions(b, "cuMemAllocManaged",
		func(n uintptr) (uintptr, error) { return in.MemAllocManaged(n, icuda.MemAttachGlobal) }, in.MemFreeManaged)
	return &Managed{w}, nil
}

// Zero implements arena.Zeroer with cuMemsetD8, which does not migrate the pages to the host.
func (p *Managed) Zero(addr, size uintptr) error { return p.memset(addr, size) }

// Prefetch queues a migration of [addr, addr+n) to loc (a device's Location, or
// cuda.HostLocation()) on stream s, with the CUDA 12.2+ cuMemPrefetchAsync_v2.
func (p *Managed) Prefetch(addr, n uintptr, loc cuda.Location, s cuda.Stream) error {
	if err := p.dev.MemPrefetchAsync(addr, n, memLocation(loc), uintptr(s)); err != nil {
		return fmt.Errorf("%w: prefetch %d bytes at %#x to %+v: %w", arena.ErrInvalid, n, addr, loc, err)
	}
	return nil
}

// Advise gives the driver advice about [addr, addr+n) for loc, with the CUDA 12.2+
// cuMemAdvise_v2.
func (p *Managed) Advise(addr, n uintptr, advice cuda.Advice, loc cuda.Location) error {
	if err := p.dev.MemAdvise(addr, n, int32(advice), memLocation(loc)); err != nil {
		return fmt.Errorf("%w: advice %d for %d bytes at %#x: %w", arena.ErrInvalid, advice, n, addr, err)
	}
	return nil
}
