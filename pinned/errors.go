package pinned

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Sentinel errors. Every error of this package wraps one of them, so callers test with
// errors.Is and never need the packages below. An error that comes from the heap, the arena or
// the CUDA driver wraps that cause as well (errors.Is(err, heap.ErrDoubleFree) and
// errors.Is(err, pinned.ErrDoubleFree) both hold), and its text starts with "pinned: ". A
// sentinel of a kind the module's packages share matches that kind too (pinned.ErrClosed
// matches pinmalloc.ErrClosed, as device's and uvm's do).
var (
	// ErrInvalidSize means a size of zero or less.
	ErrInvalidSize = errkind.New(pinmalloc.ErrInvalidSize, "pinned: invalid size")
	// ErrTooLarge means a size or an alignment beyond the pool's capacity, or more than the
	// External backend's region holds at the alignment asked.
	ErrTooLarge = errkind.New(pinmalloc.ErrTooLarge, "pinned: size exceeds the pool's capacity")
	// ErrInvalidAlign means an alignment that is not a power of two or out of range.
	ErrInvalidAlign = errkind.New(pinmalloc.ErrInvalidAlign, "pinned: invalid alignment")
	// ErrOutOfMemory means the pool is full: every byte of its capacity is in use or
	// fragmented, or the system or the driver had no memory to give (its out of memory, the
	// system's ENOMEM), for the pool's memory or for an event to check a stream new to the pool
	// with (FreeAsync, RecordStream: nothing was done).
	ErrOutOfMemory = errkind.New(pinmalloc.ErrOutOfMemory, "pinned: out of memory")
	// ErrDoubleFree means the buffer is not live: freed already, or never allocated here.
	ErrDoubleFree = errkind.New(pinmalloc.ErrDoubleFree, "pinned: double free")
	// ErrNotOwned means the slice is not memory of this pool.
	ErrNotOwned = errkind.New(pinmalloc.ErrNotOwned, "pinned: buffer not owned by this pool")
	// ErrSubSlice means the slice is part of a buffer (offset, or with its capacity cut), not the
	// buffer Alloc returned nor one resliced from its start. The buffer stays live.
	ErrSubSlice = errkind.New(pinmalloc.ErrInvalid, "pinned: not a whole buffer (sub-slice)")
	// ErrLiveBlocks means Close found buffers still live.
	ErrLiveBlocks = errkind.New(pinmalloc.ErrLiveBlocks, "pinned: buffers still live")
	// ErrClosed means the pool was used after Close.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "pinned: pool closed")
	// ErrMemlock means the memlock limit forbids locking more memory; the error names the
	// limit and how to raise it.
	ErrMemlock = errkind.New(pinmalloc.ErrMemlock, "pinned: memlock limit reached")
	// ErrInvalidOptions means Options that cannot work: out of range, or together.
	ErrInvalidOptions = errkind.New(pinmalloc.ErrInvalid, "pinned: invalid options")
	// ErrNoDriver means the CUDAHost backend found no CUDA driver or no such device (Auto falls
	// back to Locked instead).
	ErrNoDriver = errkind.New(pinmalloc.ErrNoDriver, "pinned: no CUDA driver")
	// ErrQuota means an allocation would take the pool's live bytes beyond Options.Quota.
	ErrQuota = errkind.New(pinmalloc.ErrQuota, "pinned: quota exceeded")
	// ErrTrace means writing Options.Trace failed; the pool itself is unaffected.
	ErrTrace = errkind.New(pinmalloc.ErrInvalid, "pinned: trace write failed")
	// ErrBusy means Close found freed buffers not back yet: buffers whose free waits for a CUDA
	// stream (FreeAsync) still waiting after its bound, or buffers freed while held (Hold):
	// the memory stays mapped, a later Close waits again, and a later Free, FreeAsync,
	// ForgetStream or Trim releases it once the streams have passed, or the last Release does.
	ErrBusy = errkind.New(pinmalloc.ErrBusy, "pinned: freed buffers are not back yet")
	// ErrRefused means the pool's memory source refused memory for a reason other than a want
	// of it (the driver refused a commit with another code, the process serving a shared pool
	// broke its protocol or did not answer): the error wraps the source's own, and nothing was
	// allocated. It also means the driver made no event to check a stream new to the pool with
	// (FreeAsync, RecordStream) for such a reason: the stream was not asked, nothing was done.
	ErrRefused = errkind.New(pinmalloc.ErrRefused, "pinned: the memory source refused")
	// ErrInvalidStream means a CUDA stream the driver refuses (destroyed, or of another
	// context), or the per-thread default stream, which a pool cannot order reuse after.
	ErrInvalidStream = errkind.New(pinmalloc.ErrInvalidStream, "pinned: invalid stream")
	// ErrDeviceFault means the device faulted running work of the pool's context (the
	// driver's sticky error, cuda.ErrDeviceFault, is in the chain): the driver refuses every
	// stream and event from then on, so a FreeAsync or RecordStream on a stream the pool must
	// check changes nothing, and the buffer stays the caller's (a plain Free takes it).
	ErrDeviceFault = errkind.New(pinmalloc.ErrDeviceFault, "pinned: the device faulted")
)

// causes maps the errors of the layers below to this package's sentinels, most specific
// first: a heap's out-of-memory that wraps the arena's memlock error is a memlock error, an
// arena's reserve error caused by a missing driver is ErrNoDriver, and a reserve or commit
// the system or driver refused is out of memory only where memory ran out (arena.Exhausted).
var causes = []struct{ cause, sentinel error }{
	{arena.ErrMemlock, ErrMemlock},
	{cuda.ErrNoDriver, ErrNoDriver},
	{cuda.ErrNoDevice, ErrNoDriver},
	{cuda.ErrDeviceFault, ErrDeviceFault},
	{heap.ErrInteriorPointer, ErrSubSlice},
	{heap.ErrSizeMismatch, ErrSubSlice},
	{heap.ErrDoubleFree, ErrDoubleFree},
	{heap.ErrNotOwned, ErrNotOwned},
	{heap.ErrInvalidSize, ErrInvalidSize},
	{heap.ErrTooLarge, ErrTooLarge},
	{heap.ErrInvalidAlign, ErrInvalidAlign},
	{heap.ErrLiveBlocks, ErrLiveBlocks},
	{arena.ErrBusy, ErrLiveBlocks},
	{heap.ErrClosed, ErrClosed},
	{arena.ErrClosed, ErrClosed},
	{heap.ErrOutOfMemory, ErrOutOfMemory},
	{arena.ErrCapacity, ErrOutOfMemory},
	{cuda.ErrOutOfMemory, ErrOutOfMemory},
	{heap.ErrInvalidArgument, ErrInvalidOptions},
	{arena.ErrInvalid, ErrInvalidOptions},
}

// wrapError gives an error of the layers below this package's sentinel, keeping the cause;
// one none of them names (a driver's) gets fallback. Errors that already wrap a sentinel of
// this package pass unchanged.
func wrapError(err, fallback error) error {
	if err == nil || ours(err) {
		return err
	}
	for _, c := range causes {
		if errors.Is(err, c.cause) {
			return errkind.Wrap(c.sentinel, err, c.cause)
		}
	}
	for _, c := range []error{arena.ErrReserve, arena.ErrCommit} {
		if errors.Is(err, c) {
			if arena.Exhausted(err) { // the system's ENOMEM or EAGAIN: kinds are matched above
				return errkind.Wrap(ErrOutOfMemory, err, c)
			}
			return errkind.Wrap(ErrRefused, err, c)
		}
	}
	return fmt.Errorf("%w: %w", fallback, err)
}

// streamSentinel returns the sentinel of this package for err, the driver's refusal of a wait
// for streams or of a question about one: ErrDeviceFault after a fault of the device, none
// (nil) where a CUDA graph capture put the wait off, whose error matches cuda.ErrCapturing
// alone (the streams are valid; the wait is for after the capture), ErrRefused where the
// driver made no event to ask a stream with (streamq.ErrNoEvent: the stream was not asked;
// streamError's wrapError makes one out of memory ErrOutOfMemory), ErrInvalidStream otherwise.
// A capture's refusal joined to refusals of destroyed streams is a capture's too: the pool
// answers those itself with a synchronize of the context, which only the capture puts off.
func streamSentinel(err error) error {
	switch {
	case errors.Is(err, cuda.ErrDeviceFault):
		return ErrDeviceFault
	case errors.Is(err, pinmalloc.ErrCapturing):
		return nil
	case errors.Is(err, streamq.ErrNoEvent):
		return ErrRefused
	}
	return ErrInvalidStream
}

// streamError gives err, the driver's refusal of a wait for streams or of a question about one,
// this package's sentinel (streamSentinel), its text opening with "pinned: " and what (the
// call refused, or ""), the driver's error kept.
func streamError(what string, err error) error {
	if err == nil {
		return nil
	}
	if what != "" {
		err = fmt.Errorf("%s: %w", what, err)
	}
	s := streamSentinel(err)
	if s == nil {
		return fmt.Errorf("pinned: %w", err)
	}
	return wrapError(err, s)
}

// ours reports whether err wraps a sentinel of this package.
func ours(err error) bool {
	for _, s := range []error{ErrInvalidSize, ErrTooLarge, ErrInvalidAlign, ErrOutOfMemory, ErrDoubleFree,
		ErrNotOwned, ErrSubSlice, ErrLiveBlocks, ErrClosed, ErrMemlock, ErrInvalidOptions, ErrNoDriver, ErrQuota, ErrTrace,
		ErrBusy, ErrInvalidStream, ErrRefused, ErrDeviceFault} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
