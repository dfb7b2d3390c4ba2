package arena

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/internal/align"
)

// # Lent regions
//
// A Lender's regions are loans out of one range of address space that the provider maps
// once (the pool a host's processes share, lent to each in grants: package ipcpool). Two
// things follow in the arena:
//
//   - Chunk IDs are the chunk's place in that range: (address - Space base) >> shift. A chunk
//     has the same ID in every region that ever covers it, so a region given back and another
//     lent later at the same addresses reuse the IDs without any table above (a heap's) ever
//     seeing one ID name two addresses, and a lookup that raced with the release finds what
//     it would have found before it: no segment.
//   - Regions come in the provider's Unit: the arena asks for the least multiple of it that
//     holds a request, not for Options.RegionSize.
//
// With Caps.Releases set the arena gives back a region whose chunks are all free once it has
// stayed so for the purge delay (at most half as long again, on the purge timer's ticks; at
// once at Trim): memory follows what the arena's users hold. Only chunks no span holds are
// given back, so the rule of stream order holds as it does for a decommit: memory a front
// still defers (a buffer a stream may use) lies in a span in use.
//
// Invariants (under a.mu):
//   - a released region is out of a.regions before the provider's Release is called, and its
//     chunks were all free; one whose Release is refused goes to a.refused (refused.go);
//   - r.emptied is the purge generation in which r's last chunk in use was freed, or in which
//     the span or the Precommit batch r was reserved for failed or ended; -1 while a chunk is
//     in use (Precommit's chunks too, while it commits them), and from the reserve until then.
//   - a region that holds precommitted memory (chunks stamped keepStamp) is given back at Trim
//     and Close only: the purge timer leaves it, as it leaves the memory (precommit.go).

// Lender is implemented by providers whose regions are lent out of one fixed range of address
// space: see the section above. An arena over a Lender needs Caps.Aligns and a Space whose
// base is chunk-aligned.
type Lender interface {
	// Space returns the range every region of the provider lies in.
	Space() (base, size uintptr)
	// Unit is the size regions are lent in, a multiple of the chunk size.
	Unit() uintptr
}

// lending is the arena's record of its Lender, if any.
type lending struct {
	base, size, unit uintptr
}

// newLending checks a Lender provider against the arena's geometry.
func newLending(l Lender, o Options, caps Caps) (*lending, error) {
	base, size := l.Space()
	unit := l.Unit()
	if !caps.Aligns || base%o.ChunkSize != 0 || size == 0 || size%o.ChunkSize != 0 ||
		unit == 0 || unit%o.ChunkSize != 0 {
		return nil, fmt.Errorf("%w: lender space [%#x, +%d) in units of %d does not fit "+
			"%d-byte chunks (or the provider does not align)",
			ErrInvalid, base, size, unit, o.ChunkSize)
	}
	return &lending{base: base, size: size, unit: unit}, nil
}

// lentSize is what grow asks a Lender for: the least multiple of its unit that holds need.
func (l *lending) lentSize(need uintptr) uintptr {
	n, err := align.Up(need, l.unit)
	if err != nil || n > l.size {
		return l.size
	}
	return n
}

// lentID returns the first chunk ID of a region lent at grid of n chunks, checking that it
// lies in the space.
func (a *Arena) lentID(rr *Region, grid uintptr, n int) (ChunkID, error) {
	l := a.lend
	if grid != rr.Base || grid < l.base || rr.End() > l.base+l.size || grid-l.base >= l.size {
		return 0, fmt.Errorf("%w: lent region [%#x, +%d) outside the space [%#x, +%d)",
			ErrInvalid, rr.Base, rr.Size, l.base, l.size)
	}
	return ChunkID((grid - l.base) >> a.shift), nil
}

// emptied notes that r has no chunk in use (a Free gave its last one back, or a region
// reserved for a span was left empty: the span's commit failed), for releaseIdle. A region
// empty already keeps the generation it was emptied in.
func (a *Arena) emptied(r *region) {
	if !a.caps.Releases || a.lend == nil || r.used.Count(0, r.nchunks) != 0 {
		return
	}
	if r.emptied < 0 {
		r.emptied = a.clock.Gen.Load()
	}
	a.schedulePurge()
}

// releaseIdle gives back the regions empty since generation cutoff or before (keeping those
// whose release the provider refuses: refused.go), and reports whether an empty region is left
// waiting. Called under a.mu.
func (a *Arena) releaseIdle(cutoff int64) (pending bool) {
	if !a.caps.Releases || a.lend == nil {
		return false
	}
	// A Precommit batch may be committing meanwhile: the chunks it holds are marked in use
	// (a region reserved for it is not emptied until it ends), so its regions stay.
	regs := *a.regions.Load()
	keep := make([]*region, 0, len(regs))
	var gone []*region
	for _, r := range regs {
		switch {
		case r.emptied < 0 || r.used.Count(0, r.nchunks) != 0:
			keep = append(keep, r)
		case cutoff < keepStamp && r.precommitted():
			keep = append(keep, r) // until Trim: precommitted memory waits for no timer
		case r.emptied > cutoff:
			keep = append(keep, r)
			pending = true
		default:
			gone = append(gone, r)
		}
	}
	if len(gone) == 0 {
		return pending
	}
	a.regions.Store(&keep)
	for _, r := range gone {
		ng := int((r.r.Size + a.caps.Granule - 1) >> r.gshift)
		committed := uint64(r.commit.Count(0, ng)) << r.gshift
		a.unmapping(r.r)
		a.st.Chunks -= r.nchunks
		a.st.AlignWaste -= uint64(r.grid - r.r.Base)
		if err := a.prov.Release(r.r); err != nil {
			// Logged, and released again later (refused.go).
			_ = a.keepRefused(r.r, committed, true, err)
			continue
		}
		a.reserved -= r.r.Size
		a.st.Committed -= committed
		a.st.RegionsReleased++
		a.logRelease(r.r, nil)
	}
	return pending
}

// precommitted reports whether r holds memory Precommit committed that no span took since.
func (r *region) precommitted() bool {
	n := r.nchunks
	for i := r.stale.Next(0, n, true); i < n; i = r.stale.Next(i+1, n, true) {
		if r.stamp[i] == keepStamp {
			return true
		}
	}
	return false
}
