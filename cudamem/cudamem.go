package cudamem

// What every provider shares: the device, the counters and the error reports.

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Counters counts the driver resources a CUDA provider holds now, and its calls.
type Counters struct {
	// Registrations counts host ranges registered with cuMemHostRegister.
	Registrations int64
	// Allocations counts regions allocated whole (cuMemHostAlloc, cuMemAlloc, cuMemAllocManaged).
	Allocations int64
	// Reservations counts VMM address reservations.
	Reservations int64
	// Handles counts VMM physical allocations (one per committed granule, and those the
	// driver refused to release, until it releases them).
	Handles int64
	// Streams counts the streams a device or managed provider clears memory on (arena.Zeroer):
	// made as clears need them, kept for the next, destroyed when an arena over it closes
	// (and those whose wait failed and whose destroy the driver refused, never used again).
	Streams int64
	// Committed is the memory backed through the driver, in bytes: registered host memory,
	// whole allocations, mapped VMM granules.
	Committed int64
	// Calls counts driver calls that allocate, free, register, map or unmap.
	Calls uint64
}

// Live is the number of driver resources held; zero once every arena over the provider is
// closed.
func (c Counters) Live() int64 {
	return c.Registrations + c.Allocations + c.Reservations + c.Handles + c.Streams
}

// cudaBase is what every CUDA provider has: the device, and the counters.
type cudaBase struct {
	pub   *cuda.Device  // the device the provider was given (or opened: owned)
	dev   *icuda.Device // the binding inside pub, which the driver calls go through
	name  string
	kind  arena.Kind
	owned atomic.Bool // the provider opened dev, and Close closes it (once, however many race)

	registrations, allocations, reservations, handles, streams, committed atomic.Int64
	calls                                                                 atomic.Uint64

	zs zeroStreams // the streams memset clears on (device.go)
}

// init sets up b, in place inside its provider (every provider holds its cudaBase by value,
// so that each of its methods is on the pointer).
func (b *cudaBase) init(dev *cuda.Device, name string, kind arena.Kind) error {
	in, err := internalDevice(dev, name)
	if err != nil {
		return err
	}
	b.pub, b.dev, b.name, b.kind = dev, in, name, kind
	return nil
}

// Name implements arena.Provider.
func (b *cudaBase) Name() string { return b.name }

// Kind implements arena.Provider.
func (b *cudaBase) Kind() arena.Kind { return b.kind }

// Device returns the CUDA device the provider allocates through.
func (b *cudaBase) Device() *cuda.Device { return b.pub }

// internalDevice returns the binding's device inside dev, for a provider's constructor; a nil
// or zero dev gives an error wrapping arena.ErrInvalid and cuda.ErrNoDriver.
func internalDevice(dev *cuda.Device, name string) (*icuda.Device, error) {
	d, err := icuda.Of(dev)
	if err != nil {
		return nil, fmt.Errorf("%w: %s provider: %w", arena.ErrInvalid, name, err)
	}
	return d, nil
}

// OnThread implements arena.Threaded: f runs on an OS thread locked for it with the device's
// primary context current (cuda.Device.Do), as the arena's commit workers do.
func (b *cudaBase) OnThread(f func() error) error { return b.dev.Do(f) }

// Counters returns the driver resources the provider holds.
func (b *cudaBase) Counters() Counters {
	return Counters{
		Registrations: b.registrations.Load(), Allocations: b.allocations.Load(),
		Reservations: b.reservations.Load(), Handles: b.handles.Load(), Streams: b.streams.Load(),
		Committed: b.committed.Load(), Calls: b.calls.Load(),
	}
}

// Report implements arena.Reporter.
func (b *cudaBase) Report() arena.ProviderStats {
	c := b.Counters()
	return arena.ProviderStats{DriverCalls: c.Calls, DriverObjects: c.Live(), Registrations: c.Registrations}
}

// Close gives back the device when the provider opened it (OpenHost), and does nothing
// otherwise. Call it once every arena over the provider is closed. When the driver refuses to
// release the device's primary context, Close returns its refusal and a later Close tries
// again.
func (b *cudaBase) Close() error {
	if !b.owned.CompareAndSwap(true, false) {
		return nil
	}
	if err := b.pub.Close(); err != nil {
		b.owned.Store(true) // the retain is kept: the next Close tries again
		return err
	}
	return nil
}

// call counts one driver call and, when it succeeded, adds delta to counter (nil: none).
func (b *cudaBase) call(counter *atomic.Int64, delta int64, err error) error {
	b.calls.Add(1)
	if err == nil && counter != nil {
		counter.Add(delta)
	}
	return err
}

// driverError wraps a failed driver call in an arena sentinel. When the driver is out of
// memory it says how much was asked, how much the device has free and how much this provider
// holds, and the error matches cuda.ErrOutOfMemory as well.
func (b *cudaBase) driverError(sentinel error, op string, size uintptr, err error) error {
	if !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		return fmt.Errorf("%w: %s of %d bytes on device %d: %w", sentinel, op, size, b.dev.Ordinal(), err)
	}
	free, total, ierr := b.dev.MemGetInfo()
	have := fmt.Sprintf("%d bytes free of %d", free, total)
	if ierr != nil {
		have = fmt.Sprintf("free memory unknown (%v)", ierr)
	}
	return fmt.Errorf("%w: %s of %d bytes on device %d: %w: %d bytes asked, %s on the device, "+
		"%d bytes committed by this %s provider: %w", sentinel, op, size, b.dev.Ordinal(), arena.ErrExhausted, size, have,
		b.committed.Load(), b.name, err)
}

// refusedError is the error of a driver call that the driver refused (err) although the
// provider's caller asked correctly: sentinel (pinmalloc.ErrRefused where no arena sentinel says
// it better), what the call was doing, then err; it matches arena.ErrExhausted too when the
// driver is out of memory. Never arena.ErrInvalid, which says the caller's mistake.
func refusedError(sentinel error, what string, err error) error {
	if errors.Is(err, pinmalloc.ErrOutOfMemory) {
		return fmt.Errorf("%w: %s: %w: %w", sentinel, what, arena.ErrExhausted, err)
	}
	return fmt.Errorf("%w: %s: %w", sentinel, what, err)
}

// devicePointer maps host memory registered or allocated mapped to its device address.
func (b *cudaBase) devicePointer(addr uintptr) (cuda.DevicePtr, error) {
	dp, err := b.dev.MemHostGetDevicePointer(addr)
	if err != nil {
		return 0, fmt.Errorf("%w: device pointer of %#x: %w", arena.ErrInvalid, addr, err)
	}
	return cuda.DevicePtr(dp), nil
}

// hostZero clears host-accessible memory with the CPU.
func hostZero(addr, size uintptr) error {
	clear(mem.Bytes(addr, size))
	return nil
}

// memLocation is loc as the driver takes it, or an error wrapping arena.ErrInvalid for a type or
// an ID beyond the driver's int, which a conversion would wrap onto another (1<<32, device 0).
func memLocation(loc cuda.Location) (icuda.MemLocation, error) {
	if int(int32(loc.Type)) != int(loc.Type) || int(int32(loc.ID)) != loc.ID {
		return icuda.MemLocation{}, fmt.Errorf("%w: location %+v: beyond the driver's int",
			arena.ErrInvalid, loc)
	}
	return icuda.MemLocation{Type: int32(loc.Type), ID: int32(loc.ID)}, nil
}
