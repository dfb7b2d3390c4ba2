package device

import (
	"errors"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Sentinel errors. Errors of the heap (heap.ErrNotOwned, heap.ErrDoubleFree, ...) and of the
// arena pass through wrapped. A sentinel of a kind the module's packages share matches that
// kind too (device.ErrClosed matches pinmalloc.ErrClosed); ErrNoDriver, ErrNoDevice and
// ErrOutOfMemory are the module's own (package pinmalloc).
var (
	// ErrBusy means Close found frees waiting for their stream (or for a clear the driver
	// refused), or work in flight on a stream the heap has seen; nothing was released.
	ErrBusy = errkind.New(pinmalloc.ErrBusy, "device: work in flight")
	// ErrDeviceFault means the device faulted running work of the heap's context (the
	// driver's sticky error, cuda.ErrDeviceFault, is in the chain): the driver refuses every
	// stream from then on, so a call on a stream the heap must check changes nothing, and says
	// so with it rather than with ErrInvalidStream.
	ErrDeviceFault = errkind.New(pinmalloc.ErrDeviceFault, "device: the device faulted")
	// ErrInvalidStream means the driver does not know the stream handle.
	ErrInvalidStream = errkind.New(pinmalloc.ErrInvalidStream, "device: invalid stream")
	// ErrClosed means the heap was used after Close.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "device: heap closed")
	// ErrInvalidOptions means Options that cannot work. A provider's own fault (a granule the
	// arena or the heap cannot use) is not the options': New says it with its own sentinel.
	ErrInvalidOptions = errkind.New(pinmalloc.ErrInvalid, "device: invalid options")
	// ErrNoDriver means no CUDA driver could be loaded (libcuda.so.1 is absent, it is a stub,
	// it has no cuInit, or cgo is off).
	ErrNoDriver = cuda.ErrNoDriver
	// ErrNoDevice means the driver found no such device.
	ErrNoDevice = cuda.ErrNoDevice
	// ErrOutOfMemory is pinmalloc.ErrOutOfMemory: the heap's capacity is used up (the error
	// wraps heap.ErrOutOfMemory), or the device is out of memory (CUDA_ERROR_OUT_OF_MEMORY: the
	// error says how much was asked, how much is free, and how much pinmalloc has committed),
	// or the driver had no memory for an event to check a stream new to the heap with (a call
	// on that stream: nothing done; the error says "no event to ask stream ... with"; the
	// driver's other refusals of that event match pinmalloc.ErrRefused), or for the point a
	// wait records in the legacy stream (Trim: "no event to record a point with", matching
	// pinmalloc.ErrRefused too).
	ErrOutOfMemory = pinmalloc.ErrOutOfMemory
)

// Sentinel errors of the checks that keep one tenant's copies and allocations out of another's
// memory (ErrQuota and ErrInPressureHook are with Options.Quota and the pressure hook).
var (
	// ErrOutOfBounds means a copy or memset runs past the end of the block it starts in.
	ErrOutOfBounds = errkind.New(pinmalloc.ErrInvalid, "device: range outside its block")
	// ErrNotOwned means a device address is not inside a live block of this heap: memory of
	// another heap or allocator, a freed block, or a block whose free is pending.
	ErrNotOwned = errkind.New(pinmalloc.ErrNotOwned, "device: not a live block of this heap")
)

// faulted returns err, made to match ErrDeviceFault too when the driver's sticky error
// (cuda.ErrDeviceFault) is in its chain and ErrDeviceFault is not: every call of the heap that
// the driver fails after a fault says so with this package's sentinel, as its users test it,
// and with the module's kind. An error that names this package already keeps its text; another
// is said after ErrDeviceFault's. A fault that several of the call's waits met (Sync's wait for
// the deferred frees, then the synchronize that would answer the streams it refused, ...) is
// said once, with the first wait that met it, and the other failures stay (errkind.Once). Nil
// stays nil at the cost of a comparison.
func faulted(err error) error {
	if err == nil || !errors.Is(err, cuda.ErrDeviceFault) {
		return err
	}
	if err = errkind.Once(err); errors.Is(err, ErrDeviceFault) {
		return err
	}
	return errkind.Also(ErrDeviceFault, err, "device: ")
}
