package shared

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
)

// granter hands a process grants of the shared pool: the owner's server in the owner, a
// request on the socket in an attached process. Grants are runs of contiguous grant units in
// one region.
type granter interface {
	grant(n int) (first int, err error)
	release(first, n int) error
}

// grantProvider is the arena.Provider of a process's own arena: a region of that arena is a
// run of grants of the shared pool, already mapped (and locked, as the process maps regions)
// in this process. So each process has an arena and a heap of its own over chunks of the one
// shared pool, and its Alloc and Free touch nothing shared.
type grantProvider struct {
	p *Process
}

// Name implements arena.Provider.
func (g *grantProvider) Name() string { return "shared" }

// Kind implements arena.Provider.
func (g *grantProvider) Kind() arena.Kind { return arena.HostLocked }

// Caps implements arena.Provider: a grant is committed and locked for as long as it is held.
func (g *grantProvider) Caps() arena.Caps {
	// Aligns: a grant starts on a 2 MiB boundary of a region mapped 2 MiB-aligned, so the
	// arena need not ask for room to align a chunk (which would cost a second grant).
	return arena.Caps{Granule: pageSize, Aligns: true}
}

// Capacity implements arena.FixedCapacity: the whole pool.
func (g *grantProvider) Capacity() uintptr { return g.p.poolBytes() }

// Reserve implements arena.Provider: it asks for a run of grants covering size bytes.
func (g *grantProvider) Reserve(size, align uintptr) (*arena.Region, error) {
	p := g.p
	n := int((size + p.grantSize - 1) / p.grantSize)
	if size > p.regionSize {
		return nil, fmt.Errorf("%w: %d bytes asked, a region holds %d: %w", arena.ErrCapacity, size, p.regionSize, ErrPoolFull)
	}
	first, err := p.granter.grant(n)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", arena.ErrExhausted, err)
	}
	r, off := first/p.grantsPerRegion(), uintptr(first%p.grantsPerRegion())*p.grantSize
	if base := p.maps[r] + off; align != 0 && base%align != 0 {
		_ = p.granter.release(first, n)
		return nil, fmt.Errorf("%w: a grant at %#x is not aligned to %d", arena.ErrCapacity, base, align)
	}
	return &arena.Region{Base: p.maps[r] + off, Size: uintptr(n) * p.grantSize, Committed: true, Handle: [2]int{first, n}}, nil
}

// Commit implements arena.Provider; it is never called for committed regions.
func (g *grantProvider) Commit(r *arena.Region, off, size uintptr) error {
	return r.CheckRange(off, size)
}

// Decommit implements arena.Provider; it is never called (Caps.Decommits is unset).
func (g *grantProvider) Decommit(r *arena.Region, off, size uintptr) error {
	return r.CheckRange(off, size)
}

// Release implements arena.Provider: the grants go back to the pool.
func (g *grantProvider) Release(r *arena.Region) error {
	h := r.Handle.([2]int)
	return g.p.granter.release(h[0], h[1])
}
