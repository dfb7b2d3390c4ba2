package ipcpool

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
)

// granter hands a process grants of the pool: the owner's table in the owner, a
// request on the socket in an attached process. A grant run is contiguous and
// inside one region.
type granter interface {
	// grant asks for n contiguous grants, waiting at most the process's timeout.
	grant(n int) (first int, err error)
	// release gives grants [first, first+n) back. It never waits for the owner.
	release(first, n int)
	// refuse says the owner lent a run this process cannot take (grants it holds already):
	// an attached process cuts the owner off, as for any other garbage from it, and forgets
	// the grants of the run in drop (those it does not hold: not its to claim at a rejoin).
	refuse(drop []int)
}

// source is the arena.Provider of a process's pinned.Pool: its regions are runs of grants of
// the pool, lent by the owner, already mapped (and locked, as the process maps the pool) in
// this process. So each process has a pool of its own over the one shared memory, and its
// Alloc and Free touch nothing shared. It is an arena.Lender: the arena asks for whole grants
// and, with Caps.Releases, gives a grant back once it has been empty for the purge delay
// (memory follows what each process holds).
type source struct {
	layout
	base    uintptr // the pool's range in this process
	granter granter
	kind    arena.Kind
	dev     *cuda.Device // the device the regions are registered with (HostPinned), or nil

	mu   sync.Mutex
	held []bool // by grant: lent to this process's arena
	n    int    // grants held
}

func newSource(l layout, base uintptr, g granter, dev *cuda.Device) *source {
	s := &source{layout: l, base: base, granter: g, kind: arena.HostLocked, dev: dev, held: make([]bool, l.grants())}
	if dev != nil {
		s.kind = arena.HostPinned
	}
	return s
}

// Name implements arena.Provider.
func (s *source) Name() string { return "ipcpool" }

// Kind implements arena.Provider.
func (s *source) Kind() arena.Kind { return s.kind }

// Caps implements arena.Provider: a grant is committed (and locked) while it is held, starts
// on a 2 MiB boundary of the pool's range, and goes back to the owner once empty.
func (s *source) Caps() arena.Caps {
	return arena.Caps{Granule: pageSize, Aligns: true, Releases: true}
}

// Space implements arena.Lender: the pool's range in this process.
func (s *source) Space() (base, size uintptr) { return s.base, s.poolBytes() }

// Unit implements arena.Lender: the grant size.
func (s *source) Unit() uintptr { return s.grantSize }

// Capacity implements arena.FixedCapacity: the whole pool.
func (s *source) Capacity() uintptr { return s.poolBytes() }

// Device is the device the regions are registered with (pinned orders frees by its streams).
func (s *source) Device() *cuda.Device { return s.dev }

// Reserve implements arena.Provider: it asks for a run of grants holding size bytes.
func (s *source) Reserve(size, align uintptr) (*arena.Region, error) {
	n := int((size + s.grantSize - 1) / s.grantSize)
	if size == 0 || n > s.grantsPerRegion() {
		return nil, fmt.Errorf("%w: %d bytes asked, a region of the pool holds %d", arena.ErrCapacity, size, s.regionSize)
	}
	first, err := s.granter.grant(n)
	switch {
	case errors.Is(err, ErrPoolFull) || errors.Is(err, ErrRefused):
		// Out of memory: what this process's shards keep free may be what is missing, and an
		// allocation tries again once they have given it back.
		return nil, fmt.Errorf("%w: %w", arena.ErrExhausted, err)
	case err != nil:
		return nil, err // no answer in time, the process gone: a retry would meet the same
	}
	base := s.base + uintptr(first)*s.grantSize
	if align != 0 && base%align != 0 {
		s.granter.release(first, n)
		return nil, fmt.Errorf("%w: grant %d at %#x is not aligned to %d", arena.ErrCapacity, first, base, align)
	}
	s.mu.Lock()
	for g := first; g < first+n; g++ {
		if s.held[g] {
			// Lent twice (a broken or hostile owner): the memory is a region of this
			// process's already. Neither taken nor given back (it is in use).
			var drop []int
			for d := first; d < first+n; d++ {
				if !s.held[d] {
					drop = append(drop, d)
				}
			}
			s.mu.Unlock()
			s.granter.refuse(drop)
			return nil, fmt.Errorf("%w: the owner lent grant %d, which this process holds already", ErrProtocol, g)
		}
	}
	for g := first; g < first+n; g++ {
		s.held[g] = true
	}
	s.n += n
	s.mu.Unlock()
	return &arena.Region{Base: base, Size: uintptr(n) * s.grantSize, Committed: true, Handle: [2]int{first, n}}, nil
}

// Commit implements arena.Provider; it is never called for committed regions.
func (s *source) Commit(r *arena.Region, off, size uintptr) error { return r.CheckRange(off, size) }

// Decommit implements arena.Provider; it is never called (Caps.Decommits is unset).
func (s *source) Decommit(r *arena.Region, off, size uintptr) error { return r.CheckRange(off, size) }

// Release implements arena.Provider: the grants go back to the owner.
func (s *source) Release(r *arena.Region) error {
	h, ok := r.Handle.([2]int)
	if !ok {
		return fmt.Errorf("%w: a region the pool did not lend", arena.ErrInvalid)
	}
	s.mu.Lock()
	if h[1] <= 0 || h[0] < 0 || h[0]+h[1] > len(s.held) || slices.Contains(s.held[h[0]:h[0]+h[1]], false) {
		s.mu.Unlock()
		return fmt.Errorf("%w: grants [%d, +%d) released already, or not lent", arena.ErrInvalid, h[0], h[1])
	}
	for g := h[0]; g < h[0]+h[1]; g++ {
		s.held[g] = false
	}
	s.n -= h[1]
	s.mu.Unlock()
	s.granter.release(h[0], h[1])
	return nil
}

// holds reports whether this process holds the grant under pool offset off.
func (s *source) holds(off uintptr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.grantOf(off)
	return g < len(s.held) && s.held[g]
}

// grantsHeld returns how many grants this process holds.
func (s *source) grantsHeld() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
