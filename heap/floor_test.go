package heap

import "testing"

// The floors: the least an allocator of each shape costs for one Alloc+free pair of 64 B blocks
// in Go, with no size classes, no counters and no page changes, so that docs/bench.md can say
// where the heap's nanoseconds go. None is an allocator to use: each serves one page of
// blocks that is never full.
//
//	inband       mimalloc's shape: the free list threaded through the blocks themselves (the
//	             region here is a Go slice standing for memory the CPU may write)
//	stack        off the region: a stack of free offsets, as the heap had before issue 29
//	stack+state  the stack and a state word per block, checked by the free (the double free
//	             guard), as the heap had
//	list+state   the free list threaded through the state words (freeLink), as the heap has:
//	             the guard's word is the link, so one word per operation
//
// Each alloc and free is a call, as the heap's are.

const (
	floorBlock = 64
	floorPage  = 1 << 16
	floorN     = floorPage / floorBlock
)

// floorInband is the in-band floor: mem is the page, block i's first word holds the next free
// block's index plus one (0: none).
type floorInband struct {
	mem  []uint64
	free uint32 // first free block plus one
	used int
}

//go:noinline
func (f *floorInband) alloc() uint32 {
	b := f.free
	f.free = uint32(f.mem[(b-1)*floorBlock/8])
	f.used++
	return (b - 1) * floorBlock
}

//go:noinline
func (f *floorInband) release(off uint32) {
	f.mem[off/8] = uint64(f.free)
	f.free = off/floorBlock + 1
	f.used--
}

// floorStack is the stack floor, with the state words when state is set.
type floorStack struct {
	nfree  uint32
	free   []uint32
	state  []uint32
	divMul uint32
}

//go:noinline
func (f *floorStack) alloc() uint32 {
	k := f.nfree - 1
	f.nfree = k
	return f.free[k]
}

//go:noinline
func (f *floorStack) release(off uint32) {
	f.free[f.nfree] = off
	f.nfree++
}

//go:noinline
func (f *floorStack) allocState(n uint32) uint32 {
	k := f.nfree - 1
	f.nfree = k
	off := f.free[k]
	f.state[uint64(off)*uint64(f.divMul)>>32] = n
	return off
}

//go:noinline
func (f *floorStack) releaseState(off, n uint32) bool {
	w := &f.state[uint64(off)*uint64(f.divMul)>>32]
	if *w != n {
		return false
	}
	*w = 0
	f.free[f.nfree] = off
	f.nfree++
	return true
}

// floorList is the list+state floor.
type floorList struct {
	head   uint32
	state  []uint32
	divMul uint32
}

//go:noinline
func (f *floorList) alloc(n uint32) uint32 {
	idx := f.head
	f.head = f.state[idx] &^ freeLink
	f.state[idx] = n
	return idx * floorBlock
}

//go:noinline
func (f *floorList) release(off, n uint32) bool {
	idx := uint32(uint64(off) * uint64(f.divMul) >> 32)
	w := &f.state[idx]
	if *w != n {
		return false
	}
	*w = freeLink | f.head
	f.head = idx
	return true
}

// BenchmarkFloor times each floor's pair (see above); compare with BenchmarkPairSizes/64 in
// the same run.
func BenchmarkFloor(b *testing.B) {
	divMul := ^uint32(0)/floorBlock + 1
	b.Run("inband", func(b *testing.B) {
		f := &floorInband{mem: make([]uint64, floorPage/8)}
		for i := floorN - 1; i >= 0; i-- {
			f.release(uint32(i * floorBlock))
		}
		for range b.N {
			f.release(f.alloc())
		}
	})
	stack := func() *floorStack {
		f := &floorStack{free: make([]uint32, floorN), state: make([]uint32, floorN), divMul: divMul}
		for i := floorN - 1; i >= 0; i-- {
			f.release(uint32(i * floorBlock))
		}
		return f
	}
	b.Run("stack", func(b *testing.B) {
		f := stack()
		for range b.N {
			f.release(f.alloc())
		}
	})
	b.Run("stack+state", func(b *testing.B) {
		f := stack()
		for range b.N {
			if !f.releaseState(f.allocState(floorBlock), floorBlock) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("list+state", func(b *testing.B) {
		f := &floorList{state: make([]uint32, floorN), divMul: divMul}
		for i := floorN - 1; i >= 0; i-- {
			f.state[i] = floorBlock
			if !f.release(uint32(i*floorBlock), floorBlock) {
				b.Fatal("refused")
			}
		}
		for range b.N {
			if !f.release(f.alloc(floorBlock), floorBlock) {
				b.Fatal("refused")
			}
		}
	})
}
