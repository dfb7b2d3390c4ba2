package cudamem

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
)

// Holes: committed ranges of the registration provider that the driver refused to register
// again while a Decommit, Join or cut undid what it had done (the undo of an undo). The
// arena takes such a range to be committed, so the provider keeps it on record as a hole,
// counted committed, and registers it again at its next Join or Decommit of the region
// (mend); a Join or Decommit over it, or the region's Release, takes it off the record.

// hole records g of r, committed and unregistered after the driver refused to register it
// again, and returns err (what was refused) saying so. p.mu is held.
func (p *HostRegister) hole(r *arena.Region, g hostReg, err error) error {
	p.holes[r.Base] = insertReg(p.holes[r.Base], g)
	p.committed.Add(int64(g.size))
	return fmt.Errorf("%w; [%#x, +%d) stays committed, unregistered until the next call on its region",
		err, r.Base+g.off, g.size)
}

// mend registers the holes of r again, those the driver still refuses left on record. p.mu
// is held.
func (p *HostRegister) mend(r *arena.Region) {
	hs := p.holes[r.Base]
	if len(hs) == 0 {
		return
	}
	kept := hs[:0]
	for _, g := range hs {
		if p.registerLocked(r, g) != nil {
			kept = append(kept, g)
			continue
		}
		p.committed.Add(-int64(g.size)) // counted by the hole, and again by the registration
	}
	p.holes[r.Base] = kept
}

// dropHoles takes the parts of r's holes inside [off, off+size) off the record: a Join has
// registered them, or a Decommit drops their pages. p.mu is held.
func (p *HostRegister) dropHoles(r *arena.Region, off, size uintptr) {
	hs := p.holes[r.Base]
	if len(hs) == 0 {
		return
	}
	var kept []hostReg
	end := off + size
	for _, g := range hs {
		lo, hi := max(g.off, off), min(g.end(), end)
		if lo >= hi { // no overlap
			kept = append(kept, g)
			continue
		}
		p.committed.Add(-int64(hi - lo))
		if g.off < lo {
			kept = append(kept, hostReg{g.off, lo - g.off})
		}
		if hi < g.end() {
			kept = append(kept, hostReg{hi, g.end() - hi})
		}
	}
	p.holes[r.Base] = kept
}
