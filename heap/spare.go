package heap

// A held heap's spare segments given back a few at a time. A heap with RetainSegments keeps
// every segment it empties (Heap.spares) until its owner, having seen the outside work that
// may use them end, gives them back: Trim gives them all, with the rest of the heap's free
// memory; a busy owner gives back those that have stayed empty since a mark it has ordered
// after their frees (device's idle purge: SpareMark, then a point recorded in the stream,
// then, once the stream has passed it, ReleaseSpares of the mark). A spare is stamped with the
// heap's count of spares made (segment.spareAt < Heap.spareN); one reused and emptied again is
// a new segment struct (see the invariants) with a new stamp, so a stamp below the mark says
// the segment has been empty, untouched, since before the mark.

// spare keeps empty segment s as a spare, stamped.
func (h *Heap) spare(s *segment) {
	s.spareAt = h.spareN
	h.spareN++
	h.spares = append(h.spares, s)
}

// SpareMark returns a mark of the empty segments the heap keeps now, for ReleaseSpares, and
// their number. The owner calls it.
func (h *Heap) SpareMark() (mark uint64, spares int) { return h.spareN, len(h.spares) }

// ReleaseSpares gives to the arena the empty segments the heap kept at mark (SpareMark) and
// has kept, unused, since, and returns their number. The arena decommits them after its purge
// delay. The owner calls it once nothing outside the heap uses the memory of the blocks freed
// before the mark (device: once the heap's stream has passed a point recorded after the mark).
func (h *Heap) ReleaseSpares(mark uint64) int {
	keep, n := h.spares[:0], 0
	for _, s := range h.spares {
		if s.spareAt >= mark {
			keep = append(keep, s)
			continue
		}
		_ = h.a.Free(s.span)
		h.nsegs--
		n++
	}
	clear(h.spares[len(keep):])
	h.spares = keep
	h.checkInvariants("ReleaseSpares")
	return n
}
