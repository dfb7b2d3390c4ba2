package cudamem

// What the device-side providers share: DefaultDeviceCapacity sizes a device arena by the
// memory free on the device (deviceCapacity gives DeviceVMM and DeviceMalloc their
// DefaultCapacity method), and memset clears device-accessible memory for them and Managed.

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
func (c *deviceCapacity) DefaultCapacity() uintptr {
	n, _ := defaultDeviceCapacity(c.capDev)
	return n
}

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
