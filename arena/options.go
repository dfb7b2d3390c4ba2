// Options: what an Arena is asked for, and the defaults that fill what is left zero.

package arena

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/align"
)

const (
	// DefaultChunkSize is the chunk size when Options.ChunkSize is zero.
	DefaultChunkSize = 2 << 20
	// DefaultAlign is Options.Align's default: enough for a cache line and for GPU coalescing.
	DefaultAlign      = 256
	defaultRegionSize = 1 << 30
	// maxDefaultRegionSize caps the default RegionSize of an arena that reserves its own address
	// space: a region's books take a bit per granule thrice (16 MiB each for 512 GiB of host
	// pages), and a capacity of 1 PiB would make regions of 32 TiB, whose 3 GiB of books could
	// kill the process for want of memory at the first Alloc.
	maxDefaultRegionSize = 512 << 30
	maxRegions           = 64 // regions an arena reserves at most
)

// Options configures an Arena.
type Options struct {
	// Provider is where regions come from. Required.
	Provider Provider
	// Capacity caps the bytes of all regions together. Zero takes the provider's
	// DefaultCapacity() (a share of a GPU's free memory) when it has one. A provider of fixed
	// size (an external region, with a Capacity() method) lowers it to that, and supplies it
	// when zero. Zero is otherwise an error.
	Capacity uintptr
	// ChunkSize is the chunk size, a power of two of at least the provider's granule and
	// 64 KiB. Default 2 MiB.
	ChunkSize uintptr
	// RegionSize is how much address space each growth step reserves. Default: the capacity,
	// capped at 1 GiB but at least Capacity/32, and at most 512 GiB where the arena reserves its
	// own address space (its 64 regions then reach 32 TiB at most). Requests larger than it
	// get a region of their own.
	RegionSize uintptr
	// Align is the alignment every chunk start must meet (a power of two). Default 256.
	Align uintptr
	// PurgeDelay is how long memory no span wants stays committed before it is decommitted:
	// at least this long, and at most 1.5 times as long after memory in its chunk was last
	// given back. Zero means DefaultPurgeDelay (10 ms); a negative value keeps it committed
	// until Trim.
	PurgeDelay time.Duration
	// Logger, when set, receives the arena's rare events: regions reserved or
	// refused, purges, forced purges and refused commits, with sizes. Nil logs nothing.
	Logger *slog.Logger
	// CommitWorkers is how many goroutines commit and decommit memory at once:
	// Precommit's batches, the commit of a span of at least 4 MiB, the purge's decommits.
	// Zero means DefaultCommitWorkers; 1 commits on the calling goroutine only. At most
	// MaxCommitWorkers.
	CommitWorkers int
}

// resolve checks o against its provider's capabilities and fills in the defaults.
func (o Options) resolve() (Options, Caps, error) {
	if o.Provider == nil {
		return o, Caps{}, fmt.Errorf("%w: no provider", ErrInvalid)
	}
	caps := o.Provider.Caps()
	if !align.IsPow2(caps.Granule) {
		return o, caps, fmt.Errorf("%w: provider granule %d is not a power of two", ErrInvalid, caps.Granule)
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = max(DefaultChunkSize, caps.Granule)
	}
	if !align.IsPow2(o.ChunkSize) || o.ChunkSize < 64<<10 || o.ChunkSize < caps.Granule || o.ChunkSize > 1<<30 {
		return o, caps, fmt.Errorf("%w: chunk size %d (want a power of two from 64 KiB to 1 GiB, at least the granule %d)",
			ErrInvalid, o.ChunkSize, caps.Granule)
	}
	if o.Align == 0 {
		o.Align = DefaultAlign
	}
	if !align.IsPow2(o.Align) || o.Align > o.ChunkSize {
		return o, caps, fmt.Errorf("%w: align %d (want a power of two up to the chunk size)", ErrInvalid, o.Align)
	}
	if c, ok := o.Provider.(CapacityDefaulter); ok && o.Capacity == 0 {
		o.Capacity = c.DefaultCapacity()
	}
	c, fixed := o.Provider.(FixedCapacity)
	if fixed && (o.Capacity == 0 || o.Capacity > c.Capacity()) {
		o.Capacity = c.Capacity() // a provider of fixed size caps the arena
	}
	l, lends := o.Provider.(Lender)
	if lends {
		if _, size := l.Space(); o.Capacity == 0 || o.Capacity > size {
			o.Capacity = size // a lender's space caps the arena (lend.go)
		}
	}
	if o.Capacity == 0 {
		return o, caps, fmt.Errorf("%w: capacity is zero", ErrInvalid)
	}
	if o.RegionSize == 0 {
		o.RegionSize = max(min(o.Capacity, defaultRegionSize), o.Capacity/(maxRegions/2))
		if !fixed && !lends {
			o.RegionSize = min(o.RegionSize, maxDefaultRegionSize)
		}
	}
	// No region is bigger than the capacity (grow caps each at what is left), so a bigger
	// RegionSize, however absurd, means the capacity, rounded up to a chunk (or down where the
	// rounding up overflows): never a rounding that wraps to 0, which made a region per Alloc.
	o.RegionSize = min(o.RegionSize, o.Capacity)
	if up, err := align.Up(o.RegionSize, o.ChunkSize); err == nil {
		o.RegionSize = up
	} else {
		o.RegionSize &^= o.ChunkSize - 1
	}
	if o.PurgeDelay == 0 {
		o.PurgeDelay = DefaultPurgeDelay
	}
	if o.CommitWorkers == 0 {
		o.CommitWorkers = DefaultCommitWorkers
	}
	if o.CommitWorkers < 0 || o.CommitWorkers > MaxCommitWorkers {
		return o, caps, fmt.Errorf("%w: %d commit workers (want 1 to %d, or 0 for %d)", ErrInvalid, o.CommitWorkers, MaxCommitWorkers, DefaultCommitWorkers)
	}
	return o, caps, nil
}
