package uvm

import (
	"fmt"
	"time"

	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// Options of a Tier: their defaults, their checks, and the settings the tier keeps from them.

// Defaults of Options.
const (
	// DefaultThrashLapse is the default Options.ThrashLapse, the driver's.
	DefaultThrashLapse = 500 * time.Microsecond
	// DefaultThrashPin is the default Options.ThrashPin, the driver's (300 lapses).
	DefaultThrashPin = 150 * time.Millisecond
)

// Options configures a Tier.
type Options struct {
	// DeviceBudget is the VRAM the tier's blocks may hold, in bytes (required; at most 128 TiB,
	// heap.MaxCapacity, as is HostCapacity). With no Heap, at most about 102 TiB: the device
	// heap the tier makes has room for a quarter more and 4 MiB, within 128 TiB, and never
	// commits more. Blocks of many sizes can fill that heap well within the budget (each size
	// class takes pages of its own: 64 KiB up to 8 KiB, 512 KiB up to 64 KiB, a 2 MiB segment up
	// to 256 KiB); the tier then evicts cold blocks until the block it brings back fits, and
	// fails with ErrAllPinned only when none is left to evict.
	DeviceBudget int
	// HostCapacity caps the pinned host pool (default 4×DeviceBudget, capped as follows).
	// Blocks whose bytes would exceed DeviceBudget+HostCapacity are refused with ErrHostFull.
	// With no HostPool, at most about 113 TiB: the pool the tier makes has room for an eighth
	// more and 8 MiB, within 128 TiB.
	HostCapacity int
	// HostPrecommit is how many bytes of the host pool to commit and pin in the background
	// when the tier is made, so that the first evictions do not wait for the driver to pin
	// memory (default 0: pinned as evictions need it). At most HostCapacity.
	HostPrecommit int
	// Policy orders evictions (nil: LRU()). A Policy serves one tier.
	Policy Policy
	// Mover copies batches of blocks (nil: a copyengine.Batcher that calibrates itself and moves
	// each batch with the fastest method the driver has for its block size and length: one
	// launch of the gather kernel, one cuMemcpyBatchAsync call, or one copy per block). The
	// tier closes a Mover it made, never one given here.
	Mover Mover
	// HostPool is a pool of CUDA pinned host memory (pinned.CUDAHost, of the tier's device or
	// granting it access) to take host buffers from, shared with other users (nil: the tier makes
	// its own, sized for HostCapacity); New refuses a pool of another backend. The tier gives its
	// buffers back to it once no copy uses them, and never closes it: close the pool after the
	// tier. The pool's capacity and Quota bound the tier's host buffers as much as HostCapacity
	// does: an eviction the pool refuses for want of room drops the host copies of clean blocks on
	// the device first, then fails with ErrHostFull; a refusal for another cause (the driver
	// failing to pin) fails with the pool's error, the host copies kept. HostPrecommit applies to
	// the tier's own pool only.
	HostPool *pinned.Pool
	// Heap is a device heap to take VRAM from, shared with other users (nil: the tier makes its
	// own over dev); New refuses a heap of another device. The tier becomes the heap's pressure
	// hook until Close (chaining to the hook it replaces): another user's Alloc that finds the
	// heap full makes the tier evict cold blocks first. Tiers sharing a heap may be closed in any
	// order. Give such a heap a PurgeDelay longer than the time between evictions (or -1, as the
	// tier's own heap has): VRAM the heap decommits and commits again costs far more than the
	// copies that free and reuse it.
	Heap *device.Heap
	// ThrashLapse is the longest gap between migrations of a block that counts toward
	// thrashing (default DefaultThrashLapse; negative: no thrash detection).
	ThrashLapse time.Duration
	// ThrashPin is how long a thrashing block is kept on the device (default DefaultThrashPin).
	ThrashPin time.Duration
	// Clock returns the time, for tests (nil: time.Now).
	Clock func() time.Time
	// OnMigrate, if set, is called for every block moved, with the tier's lock held: it must
	// not call the tier.
	OnMigrate func(Migration)
}

// The largest DeviceBudget and HostCapacity for which the device heap and the host pool a tier
// makes for itself (heapCapacity, poolCapacity) fit heap.MaxCapacity.
const (
	// maxOwnBudget is the largest DeviceBudget of a tier that makes its own device heap (no
	// Options.Heap): about 102 TiB.
	maxOwnBudget = (heap.MaxCapacity - 4<<20) / 5 * 4 &^ (hostAlign - 1)
	// maxOwnHostCapacity is the largest HostCapacity of a tier that makes its own host pool
	// (no Options.HostPool): about 113 TiB.
	maxOwnHostCapacity = (heap.MaxCapacity - 8<<20) / 9 * 8
)

// heapCapacity is the capacity of the device heap a tier of the given budget makes: room for
// the budget, the size classes' rounding (at most 1/8) and memory whose free waits for its copy
// out.
func heapCapacity(budget uintptr) uintptr { return roundChunk(budget + budget/4 + 4<<20) }

// poolCapacity is the capacity of the host pool a tier of the given host capacity makes (see
// openPool).
func poolCapacity(hostCap uintptr) uintptr { return roundChunk(hostCap+hostCap/8) + 8<<20 }

// withDefaults checks o and fills in the defaults of the fields left zero. A budget or host
// capacity whose own heap or pool would not fit heap.MaxCapacity is refused with
// ErrInvalidOptions naming the limit; the default HostCapacity is capped to fit.
func (o Options) withDefaults() (Options, error) {
	if o.DeviceBudget <= 0 || o.DeviceBudget > heap.MaxCapacity {
		return o, fmt.Errorf("%w: DeviceBudget %d (required, above 0 and at most 128 TiB)", ErrInvalidOptions, o.DeviceBudget)
	}
	if o.Heap == nil && roundUp(uintptr(o.DeviceBudget)) > maxOwnBudget {
		return o, fmt.Errorf("%w: DeviceBudget %d above %d, the most a tier's own device heap serves within 128 TiB (give a Heap)",
			ErrInvalidOptions, o.DeviceBudget, maxOwnBudget)
	}
	if o.HostCapacity < 0 || o.HostPrecommit < 0 || o.HostCapacity > heap.MaxCapacity {
		return o, fmt.Errorf("%w: HostCapacity %d, HostPrecommit %d (want 0 or more, HostCapacity at most 128 TiB)",
			ErrInvalidOptions, o.HostCapacity, o.HostPrecommit)
	}
	if o.HostPool == nil && o.HostCapacity > maxOwnHostCapacity {
		return o, fmt.Errorf("%w: HostCapacity %d above %d, the most a tier's own host pool serves within 128 TiB (give a HostPool)",
			ErrInvalidOptions, o.HostCapacity, maxOwnHostCapacity)
	}
	if o.HostCapacity == 0 {
		o.HostCapacity = 4 * o.DeviceBudget
		if o.HostPool == nil {
			o.HostCapacity = min(o.HostCapacity, maxOwnHostCapacity)
		}
	}
	if o.ThrashLapse == 0 {
		o.ThrashLapse = DefaultThrashLapse
	}
	if o.ThrashPin == 0 {
		o.ThrashPin = DefaultThrashPin
	}
	if o.HostPool != nil && o.HostPrecommit > 0 {
		return o, fmt.Errorf("%w: HostPrecommit %d with a HostPool (precommit the pool itself)", ErrInvalidOptions, o.HostPrecommit)
	}
	if o.HostPrecommit > o.HostCapacity {
		return o, fmt.Errorf("%w: HostPrecommit %d above HostCapacity %d", ErrInvalidOptions, o.HostPrecommit, o.HostCapacity)
	}
	if o.ThrashPin < 0 {
		return o, fmt.Errorf("%w: ThrashPin %v", ErrInvalidOptions, o.ThrashPin)
	}
	if o.Policy == nil {
		o.Policy = LRU()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return o, nil
}

// checkGiven refuses a Heap of another device than the tier's (ordinal), whose VRAM the
// tier's copies on its own device cannot reach, and a HostPool whose memory the device does not
// copy asynchronously (Pageable, Locked: Device -1), which its copies cannot read or write as
// they run. A CUDAHost pool of another device may grant the tier's device access to its memory
// (pinned.Options.Devices, pinned.NewNodes): it is taken.
func (o Options) checkGiven(ordinal int) error {
	if o.Heap != nil {
		if d := o.Heap.Device().Ordinal(); d != ordinal {
			return fmt.Errorf("%w: Heap of device %d for a tier of device %d", ErrInvalidOptions, d, ordinal)
		}
	}
	if o.HostPool != nil && o.HostPool.Device() < 0 {
		return fmt.Errorf("%w: HostPool of the %s backend: want a pool of CUDA pinned host "+
			"memory (pinned.CUDAHost)", ErrInvalidOptions, o.HostPool.Stats().Backend)
	}
	return nil
}

// settings are the Options the tier consults as it runs. Fixed by New.
type settings struct {
	clock                  func() time.Time
	onMigrate              func(Migration)
	thrashLapse, thrashPin int64 // nanoseconds; thrashLapse < 0: no thrash detection
}
