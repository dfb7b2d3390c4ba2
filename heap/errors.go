package heap

import (
	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Sentinel errors. Errors returned by the heap wrap one of them (with the address or size at
// fault), so callers test with errors.Is. Arena errors (arena.ErrCapacity, arena.ErrMemlock...)
// pass through wrapped as well. A sentinel of a kind the module's packages share matches that
// kind too (heap.ErrDoubleFree matches pinmalloc.ErrDoubleFree).
var (
	// ErrInvalidSize means a size of zero.
	ErrInvalidSize = errkind.New(pinmalloc.ErrInvalidSize, "heap: invalid size")
	// ErrTooLarge means a size beyond the arena's capacity, or an alignment beyond it, or more
	// than an arena's External region, fixed in place, holds at the alignment asked
	// (arena.Arena.MaxSpan): no memory given back could serve it.
	ErrTooLarge = errkind.New(pinmalloc.ErrTooLarge, "heap: request exceeds the arena's capacity")
	// ErrInvalidAlign means an alignment that is not a power of two, or out of range.
	ErrInvalidAlign = errkind.New(pinmalloc.ErrInvalidAlign, "heap: invalid alignment")
	// ErrOutOfMemory means the arena is full even after collecting pending frees.
	ErrOutOfMemory = errkind.New(pinmalloc.ErrOutOfMemory, "heap: out of memory")
	// ErrDoubleFree means the address is inside the arena but not the start of a live block:
	// freed already, or never handed out.
	ErrDoubleFree = errkind.New(pinmalloc.ErrDoubleFree, "heap: double free")
	// ErrNotOwned means the address is outside the arena (a foreign pointer), or in the unused
	// tail of a page.
	ErrNotOwned = errkind.New(pinmalloc.ErrNotOwned, "heap: pointer not owned by this heap")
	// ErrInteriorPointer means the address is inside a block but not at its start.
	ErrInteriorPointer = errkind.New(pinmalloc.ErrInvalid, "heap: interior pointer")
	// ErrSizeMismatch means FreeSized was given a size other than the one allocated.
	ErrSizeMismatch = errkind.New(pinmalloc.ErrInvalid, "heap: size does not match the allocation")
	// ErrLiveBlocks means Close found blocks still allocated; nothing was released.
	ErrLiveBlocks = errkind.New(pinmalloc.ErrLiveBlocks, "heap: blocks still live")
	// ErrLent means Close of a lender (SetLender) found room in its runs that a borrowing heap
	// still holds; nothing was released: close the borrowers first.
	ErrLent = errkind.New(pinmalloc.ErrLiveBlocks, "heap: room still lent to a borrowing heap")
	// ErrClosed means the heap was used after Close.
	ErrClosed = errkind.New(pinmalloc.ErrClosed, "heap: closed")
	// ErrHeld means a free of a held block (Group.Hold): only FreeHeld takes it back, so that
	// whoever holds it decides when its memory may be reused.
	ErrHeld = errkind.New(pinmalloc.ErrBusy, "heap: block held")
	// ErrInvalidArgument means an argument other than a size or an alignment is unusable: a
	// nil arena, an arena whose chunks are not 2 MiB, an unknown Retention.
	ErrInvalidArgument = errkind.New(pinmalloc.ErrInvalid, "heap: invalid argument")
)
