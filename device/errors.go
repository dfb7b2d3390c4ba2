package device

import (
	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Sentinel errors of the checks that keep one tenant's copies and allocations out of another's
// memory (the others are declared with the Heap, in device.go).
var (
	// ErrOutOfBounds means a copy or memset runs past the end of the block it starts in.
	ErrOutOfBounds = errkind.New(pinmalloc.ErrInvalid, "device: range outside its block")
	// ErrNotOwned means a device address is not inside a live block of this heap: memory of
	// another heap or allocator, a freed block, or a block whose free is pending.
	ErrNotOwned = errkind.New(pinmalloc.ErrNotOwned, "device: not a live block of this heap")
)
