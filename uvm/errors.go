package uvm

import (
	"errors"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Sentinel errors. Every error of the tier wraps one of them (with the handle or size at fault),
// so callers test with errors.Is; errors of the driver, the device heap and the pinned pool
// pass through wrapped as well. A sentinel of a kind the module's packages share matches that
// kind too (uvm.ErrClosed matches pinmalloc.ErrClosed; ErrHostFull, pinmalloc.ErrOutOfMemory).
var (
	// ErrClosed means the tier was used after Close.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "uvm: tier closed")
	// ErrInvalidHandle means a handle the tier never gave out, or one already freed (its
	// generation is stale).
	ErrInvalidHandle = errkind.New(pinmalloc.ErrNotOwned, "uvm: invalid handle")
	// ErrNotAcquired means Release or ReleaseHost of a block that is not acquired that way.
	ErrNotAcquired = errkind.New(pinmalloc.ErrInvalid, "uvm: block not acquired")
	// ErrWrongStream means Release on a stream the block was not acquired on.
	ErrWrongStream = errkind.New(pinmalloc.ErrInvalid, "uvm: release on a stream the block was not acquired on")
	// ErrAcquired means an operation that needs the block free of acquisitions (Evict, an
	// AcquireHost for writing, an Acquire for writing while the host holds it) met one, or
	// Close found blocks acquired; nothing was changed.
	ErrAcquired = errkind.New(pinmalloc.ErrBusy, "uvm: block acquired")
	// ErrTooLarge means a block larger than the device budget (it could never be resident).
	ErrTooLarge = errkind.New(pinmalloc.ErrTooLarge, "uvm: block larger than the device budget")
	// ErrAllPinned means the device budget, or the device heap, is held by acquired blocks (and
	// transfers still in flight) so that nothing can be evicted to make room: retry after a
	// Release, or use AcquireContext, which waits.
	ErrAllPinned = errkind.New(pinmalloc.ErrBusy, "uvm: every evictable byte is acquired")
	// ErrHostFull means the pinned host pool cannot take the block (an eviction, or a block
	// whose bytes would exceed what device and host together can hold); the block stays where
	// it was.
	ErrHostFull = errkind.New(pinmalloc.ErrOutOfMemory, "uvm: host pool full")
	// ErrInvalidOptions means Options that cannot work, or a bad argument (a size of zero, a
	// mode that does not exist). A size of zero or less, to Alloc or MakeRoom, matches
	// pinmalloc.ErrInvalidSize too, as other packages' sizes do.
	ErrInvalidOptions = errkind.New(pinmalloc.ErrInvalid, "uvm: invalid options")
	// ErrInvalidStream means a stream the driver does not know (never made, or destroyed):
	// Acquire and Prefetch on it change nothing; a Release or Free on it still ends the use,
	// after a wait, and says so.
	ErrInvalidStream = errkind.New(pinmalloc.ErrInvalidStream, "uvm: invalid stream")
	// ErrDeviceFault means the device's context has failed: the driver refuses the calls that
	// queue work or wait with the context's sticky error (a kernel or copy faulted; the
	// driver's error is in the chain), and no later call succeeds. Every call of the tier that
	// the driver fails so matches it (an Evict, a restore, a Free or Sync holding memory back,
	// Close), besides the sentinel that says what became of its work. Acquire and Prefetch on a
	// stream the tier must check then change nothing; a Release or Free whose release event
	// cannot be recorded, and whose wait for the device fails, ends the use all the same. They
	// say so with it rather than with ErrInvalidStream, whatever became of the stream. It is
	// of kind pinmalloc.ErrDeviceFault, as pinned's and device's are.
	ErrDeviceFault = errkind.New(pinmalloc.ErrDeviceFault, "uvm: the device failed")
	// ErrHeldBack means the tier keeps memory out of use for now, rather than reuse or give
	// back memory that work may still use or that the device heap would not take. Free
	// returns it when the driver refused the waits that order the reuse of a freed block's
	// memory after the work that may still use it (the context's sticky error, after a kernel
	// or copy faulted; the driver's error is in the chain), and for a block whose host buffer
	// the copies of a failed restore may still read: Free freed the block all the same, and
	// the tier keeps its VRAM and host buffer out of use until a synchronize of the device
	// succeeds (Sync, Close try it). Close returns it when memory is still held back, and
	// when the device heap refused spare VRAM back (during a CUDA graph capture): it then
	// keeps that memory and what holds it, and a later Close tries again.
	ErrHeldBack = errkind.New(pinmalloc.ErrRefused, "uvm: memory held back")
	// ErrLeaked means New failed part-way and could not give back the device heap or host
	// pool it had made for the tier (the driver refused to unmap or release its memory): New
	// returns no tier, so nothing can close them again, and their memory stays allocated
	// until the process ends. The error names each, with the bytes it keeps and the refusal.
	ErrLeaked = errkind.New(pinmalloc.ErrRefused, "uvm: memory left allocated")
)

// faulted returns err, made to match ErrDeviceFault too when the driver's sticky error
// (pinmalloc.ErrDeviceFault) is in its chain and ErrDeviceFault is not: every call of the tier
// that the driver fails after a fault says so with this package's sentinel, as its users test
// it, as package device's and pinned's calls do with theirs. An error that names this package
// already keeps its text; another is said after ErrDeviceFault's. Nil stays nil at the cost of
// a comparison.
func faulted(err error) error {
	if err == nil || !errors.Is(err, pinmalloc.ErrDeviceFault) || errors.Is(err, ErrDeviceFault) {
		return err
	}
	return errkind.Also(ErrDeviceFault, err, "uvm: ")
}

// invalidSize returns err, the refusal of a size of zero or less, made to match the module's
// kind for it (pinmalloc.ErrInvalidSize) too; its text is err's.
func invalidSize(err error) error { return errkind.Also(pinmalloc.ErrInvalidSize, err, "uvm: ") }
