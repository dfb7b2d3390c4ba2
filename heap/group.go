package heap

import (
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
)

// Group is a set of heaps over one arena. Any goroutine may free any block of any of them
// through Group.Free, without a lock: the block's owner collects it later.
//
// A group's chunk table maps every arena chunk to the segment that holds it. An arena's
// capacity is address space, so the table must cost nothing until the chunks are used: it has
// two levels, a directory of one pointer per leafChunks chunks (per 8 GiB), made with the group,
// and leaves of leafChunks segment pointers (32 KiB each), made when a segment in their range is
// first registered and kept for the group's life. A lookup is two dependent loads, lock-free; a
// nil leaf reads as a chunk no segment holds.
type Group struct {
	a          *arena.Arena
	dir        []atomic.Pointer[chunkLeaf] // by arena.ChunkID >> leafShift
	chunkAlign uintptr
	granule    uintptr // the provider's commit granule
}

const (
	leafShift  = 12
	leafChunks = 1 << leafShift
	// MaxCapacity is the largest arena capacity a group serves: 128 TiB, the user address
	// space of an x86-64 or arm64 process with 48-bit virtual addresses. Its chunk directory
	// is then 128 KiB.
	MaxCapacity = 1 << 47
)

// chunkLeaf maps leafChunks consecutive chunk IDs to their segments.
type chunkLeaf [leafChunks]atomic.Pointer[segment]

// NewGroup creates an empty group over an arena whose chunks are 2 MiB.
func NewGroup(a *arena.Arena) (*Group, error) {
	if a == nil {
		return nil, fmt.Errorf("%w: nil arena", ErrInvalidArgument)
	}
	if a.ChunkSize() != segSize {
		return nil, fmt.Errorf("%w: the heap needs 2 MiB chunks, the arena has %d", ErrInvalidArgument, a.ChunkSize())
	}
	if a.Capacity() > MaxCapacity {
		return nil, fmt.Errorf("%w: arena capacity %d exceeds %d (128 TiB, a 48-bit address space)", ErrInvalidArgument, a.Capacity(), uint64(MaxCapacity))
	}
	n := (a.MaxChunks() + leafChunks - 1) >> leafShift
	return &Group{a: a, dir: make([]atomic.Pointer[chunkLeaf], n), chunkAlign: a.ChunkAlign(), granule: a.Provider().Caps().Granule}, nil
}

// segmentAt returns the segment registered for chunk id, or nil.
func (g *Group) segmentAt(id arena.ChunkID) *segment {
	if l := g.dir[id>>leafShift].Load(); l != nil {
		return l[id&(leafChunks-1)].Load()
	}
	return nil
}

// slot returns the table entry of chunk id, making its leaf when it has none.
func (g *Group) slot(id arena.ChunkID) *atomic.Pointer[segment] {
	d := &g.dir[id>>leafShift]
	l := d.Load()
	if l == nil {
		l = new(chunkLeaf)
		if !d.CompareAndSwap(nil, l) {
			l = d.Load() // another heap made it first
		}
	}
	return &l[id&(leafChunks-1)]
}

// NewHeap adds a heap to the group.
func (g *Group) NewHeap(o Options) (*Heap, error) { return newHeap(g, o) }

// Arena returns the group's arena.
func (g *Group) Arena() *arena.Arena { return g.a }

// Free gives back the block at p from any goroutine, without a lock. It detects double frees,
// foreign and interior pointers exactly, like Heap.Free.
func (g *Group) Free(p uintptr) error {
	pg, idx, err := g.locate(p)
	if err != nil {
		return err
	}
	return pg.freeRemote(idx, p)
}

// FreeSized is Free with the size check of Heap.FreeSized.
func (g *Group) FreeSized(p, n uintptr) error {
	pg, idx, err := g.locateSized(p, n)
	if err != nil {
		return err
	}
	return pg.freeRemote(idx, p)
}

// Owner returns the heap that owns the live block at p.
func (g *Group) Owner(p uintptr) (*Heap, error) {
	pg, _, err := g.locate(p)
	if err != nil {
		return nil, err
	}
	return pg.heap, nil
}

// Size returns the size the block at p was allocated with.
func (g *Group) Size(p uintptr) (uintptr, error) {
	pg, idx, err := g.locate(p)
	if err != nil {
		return 0, err
	}
	n := pg.liveSize(idx)
	if n == 0 {
		return 0, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	return n, nil
}

func (g *Group) register(span arena.Span, s *segment) {
	for i := 0; i < span.N; i++ {
		g.slot(span.ID + arena.ChunkID(i)).Store(s)
	}
}

func (g *Group) unregister(span arena.Span) {
	for i := 0; i < span.N; i++ {
		g.slot(span.ID + arena.ChunkID(i)).Store(nil)
	}
}

// locate finds the page and block index of the block that starts at p.
func (g *Group) locate(p uintptr) (*page, uint32, error) {
	id, ok := g.a.Lookup(p)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %#x is outside the arena", ErrNotOwned, p)
	}
	s := g.segmentAt(id)
	if s == nil {
		return nil, 0, fmt.Errorf("%w: %#x is in a free chunk", ErrDoubleFree, p)
	}
	pg := s.huge
	if pg == nil {
		if pg = s.pages[(p-s.base)>>sliceShift].Load(); pg == nil {
			return nil, 0, fmt.Errorf("%w: %#x is in a free page", ErrDoubleFree, p)
		}
	}
	off := p - pg.base
	if p < pg.base || off >= uintptr(pg.nblocks)*pg.bsize {
		return nil, 0, fmt.Errorf("%w: %#x is outside the page's blocks", ErrNotOwned, p)
	}
	if pg.nblocks == 1 {
		if off != 0 {
			return nil, 0, fmt.Errorf("%w: %#x is %d bytes into a block", ErrInteriorPointer, p, off)
		}
		return pg, 0, nil
	}
	idx := uint32(uint64(off) * uint64(pg.divMul) >> 32)
	if uintptr(idx)*pg.bsize != off {
		return nil, 0, fmt.Errorf("%w: %#x is %d bytes into a block", ErrInteriorPointer, p, off-uintptr(idx)*pg.bsize)
	}
	return pg, idx, nil
}

func (g *Group) locateSized(p, n uintptr) (*page, uint32, error) {
	pg, idx, err := g.locate(p)
	if err != nil {
		return nil, 0, err
	}
	if live := pg.liveSize(idx); live != 0 && live != n {
		return nil, 0, fmt.Errorf("%w: %#x was allocated with %d bytes, freed with %d", ErrSizeMismatch, p, live, n)
	}
	return pg, idx, nil
}

// Block returns the start and the size asked for of the live block that holds address p,
// which may point inside it. It fails with ErrNotOwned for an address outside the arena's
// blocks, and with ErrDoubleFree for one in a free block (or in a free page or chunk). A
// caller checking that a range [p, p+n) lies inside one block tests p+n <= base+size. Frees
// of the block racing with the call are the caller's business.
//
// Its first half repeats locate's on purpose: sharing it through a helper that locate calls
// costs a free about 3 % (a call locate's inlining budget cannot absorb; measured interleaved).
func (g *Group) Block(p uintptr) (base, size uintptr, err error) {
	id, ok := g.a.Lookup(p)
	if !ok {
		return 0, 0, fmt.Errorf("%w: %#x is outside the arena", ErrNotOwned, p)
	}
	s := g.segmentAt(id)
	if s == nil {
		return 0, 0, fmt.Errorf("%w: %#x is in a free chunk", ErrDoubleFree, p)
	}
	pg := s.huge
	if pg == nil {
		if pg = s.pages[(p-s.base)>>sliceShift].Load(); pg == nil {
			return 0, 0, fmt.Errorf("%w: %#x is in a free page", ErrDoubleFree, p)
		}
	}
	off := p - pg.base
	if p < pg.base || off >= uintptr(pg.nblocks)*pg.bsize {
		return 0, 0, fmt.Errorf("%w: %#x is outside the page's blocks", ErrNotOwned, p)
	}
	idx := uint32(off / pg.bsize) // not divMul: that is exact only for block starts
	base = pg.base + uintptr(idx)*pg.bsize
	if size = pg.liveSize(idx); size == 0 {
		return 0, 0, fmt.Errorf("%w: %#x is in a free block", ErrDoubleFree, p)
	}
	if p-base >= size {
		return 0, 0, fmt.Errorf("%w: %#x is %d bytes into a block of %d bytes at %#x", ErrNotOwned, p, p-base, size, base)
	}
	return base, size, nil
}
