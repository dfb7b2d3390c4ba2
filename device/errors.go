package device

import (
	"errors"

	"github.com/pinmalloc/pinmalloc"
)

// Sentinel errors of the checks that keep one tenant's copies and allocations out of another's
// memory (the others are declared with the Heap, in device.go).
var (
	// ErrOutOfBounds means a copy or memset runs past the end of the block it starts in.
	ErrOutOfBounds = errors.New("device: range outside its block")
	// ErrNotOwned means a device address is not inside a live block of this heap: memory of
	// another heap or allocator, a freed block, or a block whose free is pending.
	ErrNotOwned = pinmalloc.NewError(pinmalloc.ErrNotOwned, "device: not a live block of this heap")
)
