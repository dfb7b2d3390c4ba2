package heap

// ClassStats describes one size class.
type ClassStats struct {
	// Size is the block size.
	Size uint64
	// Allocs and Frees count operations; Live is Allocs - Frees.
	Allocs, Frees, Live uint64
	// Pages is the number of pages the class holds.
	Pages int
}

// Stats describes a heap. Memory figures (committed, locked, reserved) belong to the arena.
type Stats struct {
	// Align is the mandated block alignment.
	Align uint64
	// InUse is the bytes asked for by live blocks; Peak its highest value.
	InUse, Peak uint64
	// Live is the number of live blocks.
	Live uint64
	// Allocs and Frees count operations of every size.
	Allocs, Frees uint64
	// Segments counts segments (kept spares included); Huge counts huge objects (kept ones
	// included).
	Segments, Huge int
	// Uncleared counts the blocks a Zalloc set aside when its clear failed, and UnclearedBytes
	// their bytes asked for: they are among Live and InUse until ReleaseUncleared.
	Uncleared      int
	UnclearedBytes uint64
	// Classes has one entry per size class with any activity.
	Classes []ClassStats
}

// Stats collects pending remote frees and returns the heap's figures. The owner calls it.
func (h *Heap) Stats() Stats {
	h.Collect()
	st := Stats{
		Align: uint64(h.align), InUse: uint64(h.live), Peak: uint64(h.peak),
		Live: h.allocs - h.frees, Allocs: h.allocs, Frees: h.frees, Segments: h.nsegs, Huge: h.nhuge,
		Uncleared: len(h.uncleared),
	}
	for _, b := range h.uncleared {
		st.UnclearedBytes += uint64(b.n)
	}
	for i := range h.classes {
		cl := &h.classes[i]
		allocs, frees := cl.counts()
		if allocs == 0 && len(cl.all) == 0 {
			continue
		}
		st.Classes = append(st.Classes, ClassStats{
			Size: uint64(cl.size), Allocs: allocs, Frees: frees, Live: allocs - frees, Pages: len(cl.all),
		})
	}
	return st
}
