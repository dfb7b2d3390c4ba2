package arena

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// ExternalRegion describes memory the caller already owns and hands to an arena: a buffer from
// cudaHostAlloc, a device allocation from another library, a shared-memory segment, a
// hugetlbfs file mapping. It is the analogue of mimalloc's mi_manage_os_memory_ex, with one
// difference that matters: no alignment is demanded of Base. The arena's page map is relative
// to the region's base, so an odd base costs nothing beyond the few bytes (fewer than the
// arena's Align) before the first address that meets the block alignment.
type ExternalRegion struct {
	// Base and Size delimit the region.
	Base, Size uintptr
	// Kind is the kind of memory the region holds.
	Kind Kind
	// Committed reports that the region is backed by memory already (the usual case). When it
	// is false the memory is host memory that commits on first touch, and the arena only
	// accounts for commits, in whole pages from Base: a last part of a page is not used. A
	// Committed region stays committed: the arena never gives any of it back, Exclusive or not.
	Committed bool
	// Zeroed reports that the region reads as zero now, so zeroed allocations may skip the memset
	// until a block is reused.
	Zeroed bool
	// Exclusive promises that nothing but this arena touches the region. Only then may the arena
	// return free parts of HostPageable memory to the system (madvise(MADV_DONTNEED)); otherwise
	// it never gives memory back and never assumes a decommitted range reads as zero. Memory of
	// the other kinds is never given back, Exclusive or not: the system refuses to drop locked
	// pages, and dropping the pages of memory registered with the driver would leave the GPU
	// copying to and from the pages it pinned while the program reads fresh zero pages.
	Exclusive bool
	// Zero clears memory of a kind the CPU cannot touch (a driver memset), as Zeroer.Zero: an
	// error that wraps ErrNotStarted (NotStarted) says nothing was written nor queued, any
	// other that the clear may still run. Host kinds are cleared with the CPU when it is nil.
	Zero func(addr, size uintptr) error
}

// ExternalProvider adopts one ExternalRegion. Its single Reserve returns that region; the arena's
// capacity is the region's size.
type ExternalProvider struct {
	mu       sync.Mutex
	reg      ExternalRegion
	reserved bool
	page     uintptr
}

// External returns a provider over a region the caller owns. The caller keeps ownership: the
// provider never unmaps or frees it, and the caller must not release it before the arena is
// closed.
func External(r ExternalRegion) (*ExternalProvider, error) {
	if r.Base == 0 || r.Size == 0 || r.Base+r.Size < r.Base {
		return nil, fmt.Errorf("%w: external region [%#x, +%d)", ErrInvalid, r.Base, r.Size)
	}
	e := &ExternalProvider{reg: r, page: pageSize()}
	if !r.Committed {
		// The arena commits a region that is not committed in whole granules (pages) from its
		// base: a last part of a page cannot be one.
		e.reg.Size &^= e.page - 1
		if e.reg.Size == 0 {
			return nil, fmt.Errorf("%w: external region [%#x, +%d) holds no whole page: one that is not Committed is used in whole pages of %d bytes",
				ErrInvalid, r.Base, r.Size, e.page)
		}
	}
	return e, nil
}

// Capacity is the region's size (in whole pages, when it is not Committed): an arena over
// this provider can hold no more.
func (e *ExternalProvider) Capacity() uintptr { return e.reg.Size }

// fixedRegion returns the region's base and size: it lies where its owner placed it, the same
// at every Reserve (fixedPlace).
func (e *ExternalProvider) fixedRegion() (base, size uintptr) { return e.reg.Base, e.reg.Size }

// fixedPlace is implemented by a provider whose one region lies fixed in place (ExternalProvider,
// and a provider that embeds one): the arena knows from it, before it reserves the region, the
// most a span at an alignment can ever hold there (Arena.MaxSpan).
type fixedPlace interface {
	fixedRegion() (base, size uintptr)
}

// Name implements Provider.
func (e *ExternalProvider) Name() string { return "external" }

// Kind implements Provider.
func (e *ExternalProvider) Kind() Kind { return e.reg.Kind }

// Caps implements Provider.
func (e *ExternalProvider) Caps() Caps {
	drops := e.drops()
	return Caps{
		Decommits: drops,
		// madvise drops whole pages only: with a base off a page boundary each granule
		// straddles two pages, and a decommitted granule keeps the bytes of its partial pages.
		ZeroOnCommit: drops && e.reg.Base%e.page == 0,
		Granule:      e.page,
	}
}

// drops reports whether Decommit gives the region's free pages back to the system: only those
// of an Exclusive region of pageable memory. Linux refuses madvise(MADV_DONTNEED) of locked
// pages (EINVAL), and a purge of a locked region would be refused at every tick; of memory
// registered with the CUDA driver (HostPinned, Managed) it would drop the program's mapping
// of pages the driver keeps pinned, so that the CPU and the GPU no longer see the same bytes.
func (e *ExternalProvider) drops() bool {
	return e.reg.Exclusive && e.reg.Kind == HostPageable
}

// Reserve implements Provider: it returns the whole region, once.
func (e *ExternalProvider) Reserve(size, _ uintptr) (*Region, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.reserved {
		return nil, fmt.Errorf("%w: the external region (%d bytes) is in use already", ErrCapacity, e.reg.Size)
	}
	if size > e.reg.Size {
		return nil, fmt.Errorf("%w: %d bytes asked of an external region of %d", ErrCapacity, size, e.reg.Size)
	}
	e.reserved = true
	return &Region{Base: e.reg.Base, Size: e.reg.Size, Committed: e.reg.Committed, Zeroed: e.reg.Zeroed}, nil
}

// Commit implements Provider. External memory is owned by the caller: committing only records
// the fact.
func (e *ExternalProvider) Commit(r *Region, off, size uintptr) error {
	return e.check(r, off, size)
}

// Decommit implements Provider. Pageable memory of an exclusive region is given back with
// madvise(MADV_DONTNEED) (it reads as zero afterwards); anything else is left alone.
func (e *ExternalProvider) Decommit(r *Region, off, size uintptr) error {
	if err := e.check(r, off, size); err != nil {
		return err
	}
	if !e.Caps().Decommits {
		return nil
	}
	// Only whole pages can be dropped; the arena's offsets are page-granular but the base may
	// not be, so trim inward.
	lo := (r.Base + off + e.page - 1) &^ (e.page - 1)
	hi := (r.Base + off + size) &^ (e.page - 1)
	if hi <= lo {
		return nil
	}
	if err := unix.Madvise(bytesAt(lo, hi-lo), unix.MADV_DONTNEED); err != nil {
		return GiveBackRefused(fmt.Errorf("madvise(DONTNEED) of %d bytes of the external region: %w",
			hi-lo, err))
	}
	return nil
}

// Release implements Provider. The region goes back to the caller, untouched.
func (e *ExternalProvider) Release(r *Region) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.reserved || r == nil || r.Base != e.reg.Base {
		return fmt.Errorf("%w: region not from this provider or already released", ErrInvalid)
	}
	e.reserved = false
	return nil
}

// Zero implements Zeroer.
func (e *ExternalProvider) Zero(addr, size uintptr) error {
	if e.reg.Zero != nil {
		return e.reg.Zero(addr, size)
	}
	if !e.reg.Kind.HostAccessible() {
		return NotStarted(fmt.Errorf("%w: cannot clear %s memory without ExternalRegion.Zero",
			ErrInvalid, e.reg.Kind))
	}
	clear(bytesAt(addr, size))
	return nil
}

func (e *ExternalProvider) check(r *Region, off, size uintptr) error {
	if r != nil && r.Base != e.reg.Base {
		return fmt.Errorf("%w: region [%#x, +%d) is not the external region", ErrInvalid, r.Base, r.Size)
	}
	return r.CheckRange(off, size)
}
