package pinned

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
)

// Sentinel errors. They are the heap's and the arena's own values, so errors.Is matches either
// name.
var (
	// ErrInvalidSize means a size of zero or less.
	ErrInvalidSize = heap.ErrInvalidSize
	// ErrTooLarge means a size beyond the pool's capacity.
	ErrTooLarge = heap.ErrTooLarge
	// ErrInvalidAlign means an alignment that is not a power of two or out of range.
	ErrInvalidAlign = heap.ErrInvalidAlign
	// ErrOutOfMemory means the pool is full: every byte of its capacity is in use or fragmented.
	ErrOutOfMemory = heap.ErrOutOfMemory
	// ErrDoubleFree means the buffer is not live: freed already, or never allocated here.
	ErrDoubleFree = heap.ErrDoubleFree
	// ErrNotOwned means the slice is not memory of this pool.
	ErrNotOwned = heap.ErrNotOwned
	// ErrSubSlice means the slice is part of a buffer (re-sliced, truncated or offset), not the
	// buffer Alloc returned. The buffer stays live.
	ErrSubSlice = errors.New("pinned: not a whole buffer (sub-slice)")
	// ErrLiveBlocks means Close found buffers still live.
	ErrLiveBlocks = heap.ErrLiveBlocks
	// ErrClosed means the pool was used after Close.
	ErrClosed = errors.New("pinned: pool closed")
	// ErrMemlock means the memlock limit forbids locking more memory; the error names the
	// limit and how to raise it.
	ErrMemlock = arena.ErrMemlock
	// ErrInvalidOptions means Options that cannot work together.
	ErrInvalidOptions = errors.New("pinned: invalid options")
	// ErrNoDriver means the CUDAHost backend found no CUDA driver (Auto falls back to Locked
	// instead).
	ErrNoDriver = arena.ErrNoDriver
)

// wrapFreeError adds ErrSubSlice to the heap's complaints about a slice that is not a whole
// buffer.
func wrapFreeError(err error) error {
	if errors.Is(err, heap.ErrInteriorPointer) || errors.Is(err, heap.ErrSizeMismatch) {
		return fmt.Errorf("%w: %w", ErrSubSlice, err)
	}
	return err
}
