package arena

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Kind is the kind of memory a provider hands out. It decides who can touch the memory (the CPU,
// a GPU, both) and how copies to and from it behave; the arena and heap treat every kind alike.
type Kind uint8

// Memory kinds.
const (
	// HostPageable is ordinary anonymous host memory: the kernel may swap or migrate it.
	HostPageable Kind = iota
	// HostLocked is host memory locked with mlock: resident, never swapped (the default).
	HostLocked
	// HostPinned is host memory page-locked and registered with the CUDA driver, so that
	// copies to and from a GPU run by DMA at full bandwidth.
	HostPinned
	// Device is GPU memory (VRAM). The CPU cannot load or store it.
	Device
	// Managed is CUDA managed (unified) memory, migrated between host and device on demand.
	Managed
)

// String returns the kind's name as used in stats and errors.
func (k Kind) String() string {
	switch k {
	case HostPageable:
		return "host-pageable"
	case HostLocked:
		return "host-locked"
	case HostPinned:
		return "host-pinned"
	case Device:
		return "device"
	case Managed:
		return "managed"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// HostAccessible reports whether the CPU may load and store memory of this kind.
func (k Kind) HostAccessible() bool { return k != Device }

// Region is a contiguous span of address space claimed from a Provider. The arena carves it
// into chunks; the provider commits and decommits parts of it on request.
type Region struct {
	// Base is the first address of the span. It meets the alignment asked of Reserve only when
	// the provider's Caps.Aligns is set.
	Base uintptr
	// Size is the span's length in bytes.
	Size uintptr
	// Committed reports that the whole span was backed by memory at Reserve (populated host
	// mappings, cuMemAlloc, an external region): Commit and Decommit are then never called for it.
	Committed bool
	// Zeroed reports that the span read as zero when it was claimed.
	Zeroed bool
	// Handle is the provider's own state for the region (a CUDA allocation handle, say).
	Handle any
}

// End returns the first address past the region.
func (r *Region) End() uintptr { return r.Base + r.Size }

// CheckRange returns an error wrapping ErrInvalid unless [off, off+size) is a non-empty range
// inside the region: what a Provider's Commit and Decommit check first.
func (r *Region) CheckRange(off, size uintptr) error {
	if r == nil || size == 0 || off > r.Size || size > r.Size-off {
		return fmt.Errorf("%w: range [%d, +%d) outside region", ErrInvalid, off, size)
	}
	return nil
}

// Caps describes what a provider can do. The arena plans around it instead of asking.
type Caps struct {
	// Aligns is set when Reserve returns a base aligned as asked at no cost in memory (by
	// over-reserving address space and trimming it). Providers that cannot align (cuMemAlloc,
	// an external region) leave it unset; the arena's page map is base-relative, so nothing
	// depends on it except how big an alignment a block can have for free.
	Aligns bool
	// Decommits is set when Decommit returns memory to the system (and Commit takes it back).
	Decommits bool
	// ZeroOnCommit is set when memory that was decommitted and committed again reads as zero.
	ZeroOnCommit bool
	// Granule is the commit granularity in bytes: a power of two that divides every offset and
	// size passed to Commit and Decommit (the OS page for host memory, 2 MiB for CUDA VMM).
	Granule uintptr
	// Splits is set when a range may be committed (or decommitted) in pieces, each its own
	// call, several at once on different goroutines, to the same effect as one call, and when
	// that is faster (VMM granules, mlocked pages): the arena then spreads big commits and
	// decommits over its workers.
	Splits bool
	// Releases is set when the provider wants its regions back once they are empty (a
	// Lender's loans): the arena releases a region whose chunks have all been free for the
	// purge delay, or at Trim, and reserves anew when it needs memory. It needs a
	// Lender.
	Releases bool
}

// Provider is where an arena's regions come from: this package has the host providers (LockedHost,
// PageableHost, PinnableHost, External), package cudamem those of CUDA memory. Implementations must
// be safe for use from several goroutines: several arenas may share one provider, and an arena
// calls Commit and Decommit for disjoint ranges of a region from several goroutines at once (its
// workers, and Precommit beside an allocation). It never calls them for overlapping ranges at once.
// A provider also implements those of the optional interfaces below that describe it; its errors
// wrap this package's sentinels (ErrReserve, ErrCommit, ErrInvalid; ErrExhausted where memory ran
// out).
type Provider interface {
	// Name is a short human-readable name: "locked", "pageable", "external", "cuda-host", ...
	Name() string
	// Kind is the kind of memory the provider hands out.
	Kind() Kind
	// Caps reports the provider's capabilities.
	Caps() Caps
	// Reserve claims at least size bytes of address space, aligned to align when Caps.Aligns
	// is set. size and align are powers-of-two multiples of Caps.Granule. It returns an error
	// wrapping ErrReserve (or ErrMemlock, ErrCapacity) on failure.
	Reserve(size, align uintptr) (*Region, error)
	// Commit backs [r.Base+off, r.Base+off+size) with memory (and locks it, for locked memory).
	Commit(r *Region, off, size uintptr) error
	// Decommit returns [r.Base+off, r.Base+off+size) to the system; the range stays reserved.
	// One that fails leaves the range committed, unless its error wraps ErrDecommitUnfinished.
	Decommit(r *Region, off, size uintptr) error
	// Release gives the whole region back. The region must not be used afterwards. A Release
	// that fails keeps what it could not give back (mapped, registered, held) with the region,
	// so that a later Release of it tries again: the arena keeps such a region, out of use and
	// counted (Stats.RegionsRefused, Reserved, Committed), and releases it again at each purge
	// tick, at Trim, at an Alloc short of capacity and at Close, which returns an error
	// wrapping ErrReleaseRefused while the provider still refuses.
	Release(r *Region) error
}

func pageSize() uintptr { return uintptr(unix.Getpagesize()) }

// Optional provider interfaces. The arena finds them with a type assertion on the provider it
// is given, so that it needs to know no provider's type: a provider implements those that
// describe it, and the arena plans around what it finds.

// Zeroer is implemented by providers that can clear memory of their kind. Host providers clear
// with the CPU; device providers with a driver memset. The heap uses it for zeroed allocation
// when memory is not known to be fresh.
//
// Zero returns once the range reads as zero. A Zero that fails may still clear the range later
// (a memset queued whose wait failed): the caller hands the range to no other user until it
// knows that no such write is left (for device and managed memory, a synchronize of the context
// that succeeded after the failure). Package heap sets such a block aside until its owner says
// so (heap.Heap.ReleaseUncleared). A Zero that fails before it began (no stream to clear on,
// the memset refused: nothing queued) says so: its error wraps ErrNotStarted (NotStarted makes
// one), the range is untouched and will stay so, and the caller may hand it to another user at
// once (the heap frees such a block).
type Zeroer interface {
	Zero(addr, size uintptr) error
}

// FixedCapacity is implemented by providers of a fixed size (an external region): an arena
// over one holds no more than Capacity, which is also its default capacity.
type FixedCapacity interface {
	Capacity() uintptr
}

// CapacityDefaulter is implemented by providers that know a sensible capacity (a share of a
// GPU's free memory): the arena takes it when Options.Capacity is zero.
type CapacityDefaulter interface {
	DefaultCapacity() uintptr
}

// Placer is implemented by providers that know the host NUMA node of their memory: Node
// returns it, or NodeUnknown. Stats and Snapshot report it for every region.
type Placer interface {
	Node() int
}

// Reporter is implemented by providers that count their own work. Arena.Stats reports it in
// Stats.Counters.
type Reporter interface {
	Report() ProviderStats
}

// ProviderStats is what a provider counts of its own work.
type ProviderStats struct {
	// Syscalls counts the system calls made for host mappings (mmap, mprotect, mlock,
	// madvise, munmap); HugeTLBFallbacks counts regions that asked for hugetlb pages and got
	// ordinary ones.
	Syscalls, HugeTLBFallbacks uint64
	// DriverCalls counts driver calls that allocate, free, register, map or unmap.
	DriverCalls uint64
	// DriverObjects counts the driver resources held now (registrations, physical allocations,
	// reservations, whole allocations); zero once every arena over the provider is closed.
	DriverObjects int64
	// Registrations counts the host ranges registered with the driver now.
	Registrations int64
}

// Threaded is implemented by providers whose calls need their thread set up: the CUDA
// providers run OnThread(f) as f on an OS thread locked for the call with the device's primary
// context current (cuda.Device.Do), so that a worker's batch of driver calls pays for it once.
type Threaded interface {
	OnThread(f func() error) error
}

// Prefaulter is implemented by providers that must commit a span in one call (a registration)
// but whose commit spends its time faulting pages in: Prefault makes [off, off+size) of r
// accessible and faults its pages in, without committing it. The arena prefaults the pieces of
// a range on several workers, then commits the range in one call. A range
// prefaulted and not committed is undone by Decommit.
type Prefaulter interface {
	Prefault(r *Region, off, size uintptr) error
}

// Joiner is implemented by providers whose memory a device can copy only in units made by one
// driver call (cuMemHostRegister: one copy's host range must lie inside one registration).
//
// The arena calls Join(r, off, size) each time it hands out committed memory for a span: when
// Alloc commits a span, and when Commit claims a range of a span in use (not one claimed
// throughout already, which it leaves as it is), with [off, off+size) the granules that the
// span's bytes (or the claimed range) touch, all committed. Join must
// leave exactly one unit covering exactly [off, off+size). Since every block a heap hands out
// lies in the range of one such call (a huge object's span; a segment's page, whose chunk is
// one granule for such providers), every block lies inside one unit. Units that Join or
// Decommit cut hold no live block: a unit is made for one span's range, the arena's chunks
// are never shared by two spans, and the pieces cut off lie in chunks that no span has
// claimed since the unit was made.
type Joiner interface {
	Join(r *Region, off, size uintptr) error
}

// KeptReleaser is a provider that may keep memory no region holds after the driver refused to
// give it back (a region it reserved for no arena in the end, a handle stranded by a refused
// release). ReleaseKept gives that memory back; what is refused again stays kept, and the
// error says so. Arena.Close calls it after releasing its regions, returns its error, and
// calls it again at the next Close while it fails.
type KeptReleaser interface {
	ReleaseKept() error
}
