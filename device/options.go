package device

import (
	"log/slog"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
)

const (
	// DefaultAlign is the block alignment when Options.Align is zero: what GPU memory
	// coalescing wants, and what cudaMalloc guarantees.
	DefaultAlign = 256
)

// Options configures a Heap. The zero value is ready to use.
type Options struct {
	// Align is the alignment of every block: a power of two from 256 to 32768 (default 256).
	Align int
	// Capacity caps the heap's device memory. Zero means cudamem.DefaultDeviceCapacity: 90 % of
	// the memory free on the device when the heap is made.
	Capacity int
	// Provider overrides where memory comes from (default cudamem.NewDevice of the
	// device). It must serve memory the device can use: a device, managed or pinned host
	// provider on the same device.
	Provider arena.Provider
	// PurgeDelay is how long free chunks stay committed in the arena (see arena.Options).
	PurgeDelay time.Duration
	// ZeroOnFree clears every block as it is freed, with a driver memset queued on the freeing
	// stream (FreeAsync) or done at once (Free), before the block can be handed out again: no
	// later user of the memory reads what it held.
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

// PressureFunc is a heap's pressure hook. It is called when an Alloc of n bytes for stream s
// finds no memory even after reclaiming what the streams hold: it may give memory of this
// heap back (a tier evicting blocks, a cache dropping entries) and returns whether the Alloc
// should try again. It is called without the heap's lock, at most pressureTries times per
// Alloc, on the goroutine that called Alloc, and never from inside itself: an Alloc the hook
// makes on that goroutine does not call it (pressure.go). s tells a hook its own allocations
// apart: a uvm.Tier allocates on its own stream while holding its lock, and answers those
// itself.
type PressureFunc func(n int, s cuda.Stream) bool

// pressureTries bounds the calls of Options.Pressure per Alloc.
const pressureTries = 3
