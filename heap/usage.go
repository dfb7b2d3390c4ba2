package heap

import "github.com/pinmalloc/pinmalloc/arena"

// Usage is what a heap holds, read without allocating: for frequent sampling.
type Usage struct {
	// Committed is the committed memory of the heap's arena (shared by the heaps of its
	// group): what the process pays for.
	Committed uint64
	// InUse is the bytes asked for by live blocks; Peak its highest value.
	InUse, Peak uint64
	// Live is the number of live blocks.
	Live uint64
}

// Usage collects pending remote frees, as Stats does, and returns the heap's figures without
// allocating. The owner calls it.
func (h *Heap) Usage() Usage {
	h.Collect()
	return Usage{Committed: h.a.Usage().Committed, InUse: uint64(h.live), Peak: uint64(h.peak), Live: h.allocs - h.frees}
}

// Usage returns the memory figures of the group's arena without allocating. The live blocks
// and bytes belong to each heap's owner: sum Heap.Usage over the heaps, as their owner.
func (g *Group) Usage() arena.Usage { return g.a.Usage() }
