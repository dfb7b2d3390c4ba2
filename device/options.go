package device

// What a Heap is made with: its Options and their defaults.

import (
	"log/slog"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
)

const (
	// DefaultAlign is the block alignment when Options.Align is zero: what GPU memory
	// coalescing wants, and what cudaMalloc guarantees.
	DefaultAlign = 256
)

// maxAlign is the largest Options.Align: the heap's largest block alignment within a page.
const maxAlign = 32768

// Options configures a Heap. The zero value is ready to use.
type Options struct {
	// Align is the alignment of every block: a power of two from 256 to 32768 (default 256).
	Align int
	// Capacity caps the heap's device memory, at most heap.MaxCapacity. Zero means
	// cudamem.DefaultDeviceCapacity: 90 % of the memory free on the device when the heap is
	// made; over a Provider, its own default (New refuses zero over one that has none).
	Capacity int
	// Provider overrides where memory comes from (default cudamem.NewDevice of the
	// device). It must serve memory the device can use: a device, managed or pinned host
	// provider on the same device. New refuses one that names another device with a
	// Device() *cuda.Device method (cudamem's providers and ipcpool's do) with
	// ErrInvalidOptions; one that names none is not checked.
	Provider arena.Provider
	// PurgeDelay is how long free memory stays committed: a stream's heap that made no
	// allocation and no free for about a purge delay gives its free memory back once the
	// stream has passed its frees (checked with a query or an event, never a wait), off the
	// allocating goroutines, and the arena decommits free chunks a purge delay after they are
	// given back (see arena.Options). Zero means arena.DefaultPurgeDelay (10 ms); a negative
	// value gives nothing back until Trim.
	PurgeDelay time.Duration
	// ZeroOnFree clears every block as it is freed, with a driver memset queued on the freeing
	// stream (FreeAsync) or done at once (Free), before the block can be handed out again: no
	// later user of the memory reads what it held. The whole block is cleared (heap.Group.Extent),
	// the bytes past the size asked for included, which the user's work may have written: up to
	// its size class, its object page, or, for a huge block, the end of the 2 MiB granule its
	// memory ends in. A free whose memset would be captured into a CUDA graph is refused (see
	// FreeAsync).
	ZeroOnFree bool
	// Quota caps the bytes of the heap's live blocks (the sizes asked for; a deferred free
	// counts until it is done); an Alloc beyond it fails with ErrQuota. Zero means no quota.
	Quota int
	// Pressure, if set, is the heap's pressure hook (see PressureFunc); SetPressure changes it
	// later.
	Pressure PressureFunc
	// Logger, when set, receives the heap's rare events at Info level and above, with sizes:
	// regions reserved or refused, purges, forced purges, and commits the driver refused.
	// Nil (the default) logs nothing.
	Logger *slog.Logger
}

// defaultsCapacity reports whether provider p sizes an arena whose Options.Capacity is zero:
// it has a default capacity, a fixed size or a lender's space.
func defaultsCapacity(p arena.Provider) bool {
	switch p.(type) {
	case arena.CapacityDefaulter, arena.FixedCapacity, arena.Lender:
		return true
	}
	return false
}
