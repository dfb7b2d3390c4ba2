package heap

import "errors"

// Sentinel errors. Errors returned by the heap wrap one of them (with the address or size at
// fault), so callers test with errors.Is. Arena errors (arena.ErrCapacity, arena.ErrMemlock...)
// pass through wrapped as well.
var (
	// ErrInvalidSize means a size of zero.
	ErrInvalidSize = errors.New("heap: invalid size")
	// ErrTooLarge means a size beyond the arena's capacity.
	ErrTooLarge = errors.New("heap: size exceeds the arena's capacity")
	// ErrInvalidAlign means an alignment that is not a power of two, or out of range.
	ErrInvalidAlign = errors.New("heap: invalid alignment")
	// ErrOutOfMemory means the arena is full even after collecting pending frees.
	ErrOutOfMemory = errors.New("heap: out of memory")
	// ErrDoubleFree means the address is inside the arena but not the start of a live block:
	// freed already, or never handed out.
	ErrDoubleFree = errors.New("heap: double free")
	// ErrNotOwned means the address is outside the arena (a foreign pointer), or in the unused
	// tail of a page.
	ErrNotOwned = errors.New("heap: pointer not owned by this heap")
	// ErrInteriorPointer means the address is inside a block but not at its start.
	ErrInteriorPointer = errors.New("heap: interior pointer")
	// ErrSizeMismatch means FreeSized was given a size other than the one allocated.
	ErrSizeMismatch = errors.New("heap: size does not match the allocation")
	// ErrLiveBlocks means Close found blocks still allocated; nothing was released.
	ErrLiveBlocks = errors.New("heap: blocks still live")
	// ErrClosed means the heap was used after Close.
	ErrClosed = errors.New("heap: closed")
	// ErrHeld means a free of a held block (Group.Hold): only FreeHeld takes it back, so that
	// whoever holds it decides when its memory may be reused.
	ErrHeld = errors.New("heap: block held")
	// ErrInvalidArgument means an argument other than a size or an alignment is unusable: a
	// nil arena, an arena whose chunks are not 2 MiB, an unknown Retention.
	ErrInvalidArgument = errors.New("heap: invalid argument")
)
