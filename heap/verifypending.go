package heap

import "fmt"

// verifyPending checks the owner's pending stack against the pages' remote bitmaps (remote.go):
// a page of the heap is on the stack, once, exactly while its pending flag is set, and every
// page with a remote bit set is on it, so that no remote free is left uncollected for good.
// pages are the heap's live pages, class and object pages alike. Dead pages may stay on the
// stack (stale entries, ignored by collectPage). Like verify, it needs no other goroutine at
// work on the heap's pages: a remote free half done has set a bit before it pushes.
func (h *Heap) verifyPending(pages []*page) error {
	on := map[*page]bool{}
	for pg := h.pending.head.Load(); pg != nil; pg = pg.nextPending {
		switch {
		case on[pg]:
			return fmt.Errorf("pending stack: page %#x is on it twice", pg.base)
		case pg.heap != h:
			return fmt.Errorf("pending stack: page %#x is another heap's", pg.base)
		case pg.pending.Load() == 0:
			return fmt.Errorf("pending stack: page %#x is on it with its pending flag clear", pg.base)
		}
		on[pg] = true
	}
	for _, pg := range pages {
		if pending := pg.pending.Load() != 0; pending != on[pg] {
			return fmt.Errorf("page %#x: pending flag %v, on the pending stack %v", pg.base, pending, on[pg])
		}
		for w := range pg.remote {
			if pg.remote[w].Load() != 0 && !on[pg] {
				return fmt.Errorf("page %#x: remote bits %#x set, yet it is not on the pending stack",
					pg.base, pg.remote[w].Load())
			}
		}
	}
	return nil
}
