package heap

import (
	"errors"

	"github.com/pinmalloc/pinmalloc"
)

// Sentinel errors. Errors returned by the heap wrap one of them (with the address or size at
// fault), so callers test with errors.Is. Arena errors (arena.ErrCapacity, arena.ErrMemlock...)
// pass through wrapped as well. A sentinel of a kind the module's packages share matches that
// kind too (heap.ErrDoubleFree matches pinmalloc.ErrDoubleFree).
var (
	// ErrInvalidSize means a size of zero.
	ErrInvalidSize = pinmalloc.NewError(pinmalloc.ErrInvalidSize, "heap: invalid size")
	// ErrTooLarge means a size beyond the arena's capacity.
	ErrTooLarge = pinmalloc.NewError(pinmalloc.ErrTooLarge, "heap: size exceeds the arena's capacity")
	// ErrInvalidAlign means an alignment that is not a power of two, or out of range.
	ErrInvalidAlign = pinmalloc.NewError(pinmalloc.ErrInvalidAlign, "heap: invalid alignment")
	// ErrOutOfMemory means the arena is full even after collecting pending frees.
	ErrOutOfMemory = pinmalloc.NewError(pinmalloc.ErrOutOfMemory, "heap: out of memory")
	// ErrDoubleFree means the address is inside the arena but not the start of a live block:
	// freed already, or never handed out.
	ErrDoubleFree = pinmalloc.NewError(pinmalloc.ErrDoubleFree, "heap: double free")
	// ErrNotOwned means the address is outside the arena (a foreign pointer), or in the unused
	// tail of a page.
	ErrNotOwned = pinmalloc.NewError(pinmalloc.ErrNotOwned, "heap: pointer not owned by this heap")
	// ErrInteriorPointer means the address is inside a block but not at its start.
	ErrInteriorPointer = errors.New("heap: interior pointer")
	// ErrSizeMismatch means FreeSized was given a size other than the one allocated.
	ErrSizeMismatch = errors.New("heap: size does not match the allocation")
	// ErrLiveBlocks means Close found blocks still allocated; nothing was released.
	ErrLiveBlocks = pinmalloc.NewError(pinmalloc.ErrLiveBlocks, "heap: blocks still live")
	// ErrClosed means the heap was used after Close.
	ErrClosed = pinmalloc.NewError(pinmalloc.ErrClosed, "heap: closed")
	// ErrHeld means a free of a held block (Group.Hold): only FreeHeld takes it back, so that
	// whoever holds it decides when its memory may be reused.
	ErrHeld = errors.New("heap: block held")
	// ErrInvalidArgument means an argument other than a size or an alignment is unusable: a
	// nil arena, an arena whose chunks are not 2 MiB, an unknown Retention.
	ErrInvalidArgument = pinmalloc.NewError(pinmalloc.ErrInvalid, "heap: invalid argument")
)
