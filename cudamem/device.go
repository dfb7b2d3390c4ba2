package cudamem

// What the device-side providers share: DefaultDeviceCapacity sizes a device arena by the
// memory free on the device (deviceCapacity gives DeviceVMM and DeviceMalloc their
// DefaultCapacity method), and memset clears device-accessible memory for them and Managed.

import (
	"errors"
	"fmt"
	"sync"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/align"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
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

// zeroStreams are the streams memset clears memory on: non-blocking streams the provider
// makes as clears need them (one per clear at a time) and keeps for the next clears, until
// dropStreams destroys those not in use (its ReleaseKept, which Arena.Close calls). A stream
// whose wait failed is never used again: destroyed, or kept aside in broken where the driver
// refuses to destroy it, for dropStreams to destroy.
type zeroStreams struct {
	mu     sync.Mutex     // guards free and broken
	free   []icuda.Stream // made and not in use
	broken []icuda.Stream // whose wait failed and whose destroy was refused: never reused
}

// memset clears device-accessible memory with the driver, and waits for it. The memset runs on
// a non-blocking stream of the provider's (zeroStreams), synchronized: a cuMemsetD8 of device
// memory returns before it has run, queued on the legacy default stream, which work on
// non-blocking streams does not wait for (the driver API's "API synchronization behavior"), so
// the next user of the memory could write it before the memset clears it; and the driver
// refuses any use of the legacy stream while a blocking stream captures a graph
// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), ending that capture. A stream whose synchronize fails
// may still have the memset queued, or be broken: it is destroyed rather than kept, and one
// the driver refuses to destroy is kept aside, never cleared on again; its error says the
// memset may still run (arena.Zeroer). When no stream can be had, or the driver refuses the
// memset, nothing was queued: the error wraps arena.ErrNotStarted, and the range may serve at
// once. Its calls run in the RELAXED capture mode, as the allocations' (doc.go).
func (b *cudaBase) memset(addr, size uintptr) error {
	defer b.dev.RelaxCapture()() // beside a user's capture: doc.go
	s, err := b.zeroStream()
	if err != nil { // nothing queued: arena.ErrNotStarted
		return refusedError(arena.ErrNotStarted, fmt.Sprintf("a stream for cuMemsetD8Async of"+
			" %d bytes at %#x", size, addr), err)
	}
	if err := b.dev.MemsetD8Async(addr, 0, size, s); err != nil { // refused: nothing queued
		b.keepStream(s)
		return refusedError(arena.ErrNotStarted, fmt.Sprintf("cuMemsetD8Async of %d bytes at %#x",
			size, addr), err)
	}
	if err := b.dev.StreamSynchronize(s); err != nil {
		err = refusedError(pinmalloc.ErrRefused, fmt.Sprintf("waiting for cuMemsetD8Async of %d"+
			" bytes at %#x", size, addr), err)
		return errors.Join(err, b.destroyBroken(s))
	}
	b.keepStream(s)
	return nil
}

// zeroStream takes a stream for a clear: one kept, or a new one.
func (b *cudaBase) zeroStream() (icuda.Stream, error) {
	z := &b.zs
	z.mu.Lock()
	if n := len(z.free); n > 0 {
		s := z.free[n-1]
		z.free = z.free[:n-1]
		z.mu.Unlock()
		return s, nil
	}
	z.mu.Unlock()
	s, err := b.dev.StreamCreate(true)
	if err == nil {
		b.streams.Add(1)
	}
	return s, err
}

// keepStream keeps s, which a clear is done with, for the next clears.
func (b *cudaBase) keepStream(s icuda.Stream) {
	b.zs.mu.Lock()
	b.zs.free = append(b.zs.free, s)
	b.zs.mu.Unlock()
}

// keepBroken keeps s, a stream of memset's whose wait failed and whose destroy the driver
// refused, aside: counted, destroyed by dropStreams, never cleared on again.
func (b *cudaBase) keepBroken(s icuda.Stream) {
	b.zs.mu.Lock()
	b.zs.broken = append(b.zs.broken, s)
	b.zs.mu.Unlock()
}

// destroyBroken destroys s, a stream of memset's whose wait failed; one the driver refuses to
// destroy is kept aside (keepBroken).
func (b *cudaBase) destroyBroken(s icuda.Stream) error {
	if err := b.dev.StreamDestroy(s); err != nil {
		b.keepBroken(s)
		return streamsKept(1, err)
	}
	b.streams.Add(-1)
	return nil
}

// dropStreams destroys memset's streams not in use, those kept aside after a failed wait with
// them; those the driver refuses to destroy are kept where they were, and the error says so,
// each different refusal once (under the context's sticky error the driver refuses every one
// alike).
func (b *cudaBase) dropStreams() error {
	b.zs.mu.Lock()
	free, broken := b.zs.free, b.zs.broken
	b.zs.free, b.zs.broken = nil, nil
	b.zs.mu.Unlock()
	var errs []error
	for i, ss := range [2][]icuda.Stream{free, broken} {
		for _, s := range ss {
			err := b.dev.StreamDestroy(s)
			if err == nil {
				b.streams.Add(-1)
				continue
			}
			if i == 0 {
				b.keepStream(s)
			} else {
				b.keepBroken(s)
			}
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return streamsKept(len(errs), errkind.Once(errs...))
}

// streamsKept is the error of n streams of the provider's clears kept after the driver's
// refusal err to destroy them.
func streamsKept(n int, err error) error {
	what := "a stream"
	if n > 1 {
		what = fmt.Sprintf("%d streams", n)
	}
	return refusedError(pinmalloc.ErrRefused, "destroying "+what+" of the provider's clears (kept)",
		err)
}
