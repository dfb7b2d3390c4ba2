package heap

import (
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/keep"
)

// verifyObject checks the kept-range invariants of object or huge page pg of the heap (see the
// package documentation, "Kept object pages and huge objects"): live, its tracked range is
// busy, never idle nor given up, for the arena's purge gives up an idle range whatever uses
// it, and a live object page's slices are known committed; kept (on objFree or bigFree), its
// tracked range is idle or given up, or busy only where a reuse found it given up and noted
// its memory gone (Claim leaves it so); a held heap (RetainSegments) tracks none.
func (h *Heap) verifyObject(pg *page, kept bool) error {
	huge := pg.seg.kind == segHuge
	st := uint32(pg.kept.Word.Load() & keep.State)
	switch {
	case h.hold && pg.tracked:
		return fmt.Errorf("object %#x: tracked in a held heap", pg.base)
	case !pg.tracked:
	case !kept && st != keep.Busy:
		return fmt.Errorf("object %#x: live, yet its kept range is in state %d, not busy", pg.base, st)
	case kept && st == keep.Busy && (huge && pg.want != 0 || !huge && pg.knownCommitted()):
		return fmt.Errorf("object %#x: kept, its range busy, yet its memory is noted committed", pg.base)
	}
	if !kept && !huge && !pg.knownCommitted() {
		return fmt.Errorf("object %#x: live, yet its slices are not all known committed", pg.base)
	}
	return nil
}

// verifyKept checks the heap's lists of kept object pages and huge objects: each page once, the
// heap's, free, not dead, on the list of its kind, and as verifyObject says; a held heap keeps
// no huge object. It returns the kept pages.
func (h *Heap) verifyKept() (map[*page]bool, error) {
	kept := map[*page]bool{}
	if h.hold && len(h.bigFree) != 0 {
		return kept, fmt.Errorf("a held heap keeps %d huge objects", len(h.bigFree))
	}
	for i, list := range [][]*page{h.objFree, h.bigFree} {
		for _, pg := range list {
			st := atomic.LoadUint32(&pg.state[0])
			switch {
			case kept[pg]:
				return kept, fmt.Errorf("kept page %#x is on the kept lists twice", pg.base)
			case pg.heap != h || pg.class >= 0 || (pg.seg.kind == segHuge) != (i == 1):
				return kept, fmt.Errorf("kept page %#x is not an object page of the heap on its kind's list",
					pg.base)
			case st != 0 && st&freedRemote == 0 || pg.dead:
				return kept, fmt.Errorf("kept page %#x: state %#x, dead %v", pg.base, st, pg.dead)
			}
			kept[pg] = true
			if err := h.verifyObject(pg, true); err != nil {
				return kept, err
			}
		}
	}
	return kept, nil
}
