package heap

import (
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/units"
)

// Group is a set of heaps over one arena. Any goroutine may free any block of any of them
// through Group.Free, without a lock: the block's owner collects it later.
//
// # Finding a block's segment
//
// Two tables map addresses to segments, both lock-free to read and written only when a
// segment is registered or unregistered (never on an allocation or a free).
//
// The address table is the fast one: it is keyed by the address itself, in slots of 2 MiB of
// address space, so a lookup is two dependent loads (a leaf, then a slot) whatever the number
// of regions, with no search. It has a directory of one pointer per 4096 slots (per 8 GiB)
// covering the 128 TiB of a 48-bit user address space (128 KiB, made with the group) and
// leaves of 4096 slots (64 KiB each) made when a segment in their range is first
// registered. A slot holds two segments: lo, the one whose chunks cover the slot's first byte,
// and hi, one that starts inside the slot. When the arena's chunks are 2 MiB aligned (host
// memory, VMM) a segment always starts on a slot and hi stays empty; when they are not (an
// external region, cuMemAlloc), a chunk straddles two slots and is lo of one and hi of the
// other. A slot that would need a third segment (two region ends inside 2 MiB), and an address
// beyond the directory, are left to the chunk table.
//
// The chunk table is the complete one: keyed by arena.ChunkID, which the arena's Lookup finds by
// scanning its regions. It has the same two levels, a directory of one pointer per 4096 chunks
// (sized by the arena's capacity) and leaves of 4096 segment pointers (32 KiB each).
// A lookup the address table misses goes there, and so does every error: the two agree on every
// registered segment, so the fast table only ever answers sooner.
//
// Both keep their leaves for the group's life, and a nil leaf or slot reads as no segment.
// Segments are never reused (see the package invariants), so a lookup racing with an
// unregistration finds either nil or a segment whose pages report the block free.
type Group struct {
	a          *arena.Arena
	addr       []atomic.Pointer[addrLeaf]  // by address >> addrLeafShift
	dir        []atomic.Pointer[chunkLeaf] // by arena.ChunkID >> leafShift
	chunkAlign uintptr
	granule    uintptr // the provider's commit granule
	decommits  bool    // the provider gives memory back (Caps.Decommits)
	coarse     bool    // it commits in granules of a chunk or more (pack.go)
	joins      bool    // the provider is an arena.Joiner: no commit unit with a live block is cut
	packRuns   bool    // coarse, and a block may span commits: pages run on across chunks (pack.go)
	exclusive  bool    // class pages start exclusive (exclusive.go)
	nheaps     atomic.Int32
	// Changes to pages by goroutines other than the owner (remote frees, holds) begun and
	// ended, counted only when invariants.Enabled (Heap.checkInvariants).
	foreignBegun, foreignEnded atomic.Uint64
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

const (
	addrLeafSlots = 1 << 12                      // slots per leaf
	addrLeafShift = segShift + 12                // address bits below a leaf's index: 8 GiB
	addrDirLen    = MaxCapacity >> addrLeafShift // leaves in the directory: 128 TiB of addresses
)

// addrSlot is the address table's entry for 2 MiB of address space: see Group.
type addrSlot struct{ lo, hi atomic.Pointer[segment] }

// addrLeaf is addrLeafSlots consecutive slots: 8 GiB of address space.
type addrLeaf [addrLeafSlots]addrSlot

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
	caps := a.Provider().Caps()
	_, joins := a.Provider().(arena.Joiner)
	coarse := caps.Granule >= segSize && caps.Decommits
	return &Group{a: a, addr: make([]atomic.Pointer[addrLeaf], addrDirLen),
		dir: make([]atomic.Pointer[chunkLeaf], n), chunkAlign: a.ChunkAlign(),
		granule: caps.Granule, decommits: caps.Decommits, coarse: coarse, joins: joins,
		packRuns: coarse && !joins, exclusive: exclusiveOK()}, nil
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
	return &leaf(&g.dir[id>>leafShift])[id&(leafChunks-1)]
}

// leaf returns the leaf a directory entry points to, making it when there is none.
func leaf[L any](d *atomic.Pointer[L]) *L {
	l := d.Load()
	if l == nil {
		l = new(L)
		if !d.CompareAndSwap(nil, l) {
			l = d.Load() // another heap made it first
		}
	}
	return l
}

// NewHeap adds a heap to the group.
func (g *Group) NewHeap(o Options) (*Heap, error) { return newHeap(g, o) }

// Arena returns the group's arena.
func (g *Group) Arena() *arena.Arena { return g.a }

// Free gives back the block at p from any goroutine, without a lock. It detects double frees,
// foreign and interior pointers exactly, like Heap.Free.
func (g *Group) Free(p uintptr) error {
	pg, idx, ok := g.find(p) // not locate: a call less on the hot path
	if !ok {
		return g.whyNot(p)
	}
	return pg.freeRemote(idx, p, 0, 0)
}

// FreeSized is Free with the size check of Heap.FreeSized.
func (g *Group) FreeSized(p, n uintptr) error { return g.freeSized(p, n, 0) }

// freeSized is FreeSized of a block held or not, as hold says (see freeState).
func (g *Group) freeSized(p, n uintptr, hold uint32) error {
	pg, idx, ok := g.find(p) // not locate: a call less on the hot path
	if !ok {
		return g.whyNot(p)
	}
	if n == 0 {
		return fmt.Errorf("%w: %#x freed with 0 bytes", ErrSizeMismatch, p)
	}
	return pg.freeRemote(idx, p, n, hold)
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

// Extent returns the bytes from p that the live block at p covers, all of them committed: what
// its owner's work can write without a fault, and so what a caller clearing the block for its
// next owner clears. For a block of a size class, the class's size (a live block lies in
// committed memory whole); for an object page, the page's whole slices (committed while its
// block lives). For a huge object, the bytes up to the end of the commit granule its committed
// memory ends in (arena.Arena.GranuleEnd): the size asked for rounded up to the granule, or more
// when reuse kept memory committed for an earlier, larger request (a tail under a granule);
// never past its own chunks, nor, where it shares its last chunk with other pages (a heap that
// packs, over memory committed a chunk at a time), past its own slices of that chunk. An extent
// never covers another block's bytes, nor a granule decommitted or handed to the purge: a
// memset of it does not fault, nor race the purge.
//
// Bytes of a huge object's span past its extent (a kept huge object reused for fewer bytes gives
// the granules past them to the purge; one the arena gave up is committed again only as far as
// asked) are no more its owner's to write than a neighbouring block's: they may be decommitted
// under it at any time, and its work reaches them only by writing past its extent. An earlier
// owner wrote there only within its own extent, so where every free clears its block's extent,
// no owner reads an earlier one's bytes, although such granules are committed again as they
// were, not zeroed, when the purge has not reached them. It fails as Size does.
func (g *Group) Extent(p uintptr) (uintptr, error) {
	pg, idx, err := g.locate(p)
	if err != nil {
		return 0, err
	}
	if pg.liveSize(idx) == 0 {
		return 0, fmt.Errorf("%w: %#x", ErrDoubleFree, p)
	}
	return pg.extent(), nil
}

// extent returns what Extent does for the live block of page pg.
func (pg *page) extent() uintptr {
	if pg.class >= 0 || pg.seg.kind != segHuge {
		return pg.bsize
	}
	a := pg.heap.a
	own := pg.bsize // with a tail: the object's own slices of its last chunk
	if s := pg.seg.span; pg.tail == nil {
		// The span's chunks are the object's alone, the rest of its last one included.
		if c, ok := a.ChunkBase(s.ID); ok {
			own = c + uintptr(s.N)<<segShift - pg.base
		}
	}
	// Committed up to want (see the invariants), so to the end of the granule want ends in.
	end, ok := a.GranuleEnd(pg.base + pg.want - 1)
	if !ok || end < pg.base+pg.want {
		return pg.want // cannot happen: the object's memory lies in a region
	}
	return min(end-pg.base, own)
}

// register enters s in both tables for the chunks of its span.
func (g *Group) register(s *segment) {
	for i := 0; i < s.span.N; i++ {
		g.slot(s.span.ID + arena.ChunkID(i)).Store(s)
	}
	g.eachAddrSlot(s, func(e *atomic.Pointer[segment]) { e.CompareAndSwap(nil, s) }) // taken: see Group
}

// unregister takes s out of both tables.
func (g *Group) unregister(s *segment) {
	for i := 0; i < s.span.N; i++ {
		g.slot(s.span.ID + arena.ChunkID(i)).Store(nil)
	}
	g.eachAddrSlot(s, func(e *atomic.Pointer[segment]) { e.CompareAndSwap(s, nil) })
}

// eachAddrSlot calls f with the address-table entry (lo or hi) of each slot s's chunks touch,
// making leaves as needed.
func (g *Group) eachAddrSlot(s *segment, f func(*atomic.Pointer[segment])) {
	end := s.base + s.span.Size
	for slot := s.base &^ (segSize - 1); slot < end && slot>>addrLeafShift < addrDirLen; slot += segSize {
		e := &leaf(&g.addr[slot>>addrLeafShift])[slot>>segShift&(addrLeafSlots-1)]
		if s.base <= slot {
			f(&e.lo)
		} else {
			f(&e.hi)
		}
	}
}

// segmentOf returns the segment of the address table whose span holds address p, or nil
// (then only the chunk table can say).
func (g *Group) segmentOf(p uintptr) *segment {
	if i := p >> addrLeafShift; i < uintptr(len(g.addr)) {
		if l := g.addr[i].Load(); l != nil {
			e := &l[p>>segShift&(addrLeafSlots-1)]
			if s := e.lo.Load(); s != nil && p-s.base < s.span.Size {
				return s
			}
			if s := e.hi.Load(); s != nil && p-s.base < s.span.Size {
				return s
			}
		}
	}
	return nil
}

// segmentSlow finds the segment holding address p through the arena's regions and the chunk
// table, for what the address table does not answer: it says why there is none.
func (g *Group) segmentSlow(p uintptr) (*segment, error) {
	id, ok := g.a.Lookup(p)
	if !ok {
		return nil, fmt.Errorf("%w: %#x is outside the arena", ErrNotOwned, p)
	}
	if s := g.segmentAt(id); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("%w: %#x is in a free chunk", ErrDoubleFree, p)
}

// locate finds the page and block index of the block that starts at p.
func (g *Group) locate(p uintptr) (*page, uint32, error) {
	if pg, idx, ok := g.find(p); ok {
		return pg, idx, nil
	}
	return nil, 0, g.whyNot(p)
}

// find is locate without the error: it builds nothing, allocates nothing and takes no lock,
// so a non-blocking path (TryFree) may call it.
func (g *Group) find(p uintptr) (*page, uint32, bool) {
	s := g.segmentOf(p)
	if s == nil {
		id, ok := g.a.Lookup(p)
		if !ok {
			return nil, 0, false
		}
		if s = g.segmentAt(id); s == nil {
			return nil, 0, false
		}
	}
	pg := s.huge
	if pg == nil {
		if pg = s.pages[(p-s.base)>>sliceShift].Load(); pg == nil {
			return nil, 0, false
		}
	}
	off := p - pg.base
	if off >= pg.span { // p below base too: off wraps
		return nil, 0, false
	}
	if pg.nblocks == 1 {
		return pg, 0, off == 0
	}
	idx := uint32(uint64(off) * uint64(pg.divMul) >> 32)
	return pg, idx, uintptr(idx)*pg.bsize == off
}

// whyNot says why find refused p. Tables may have changed since (a racing free or page
// release): it reports what it sees now, and a block found now is reported as freed.
func (g *Group) whyNot(p uintptr) error {
	pg, err := g.pageOf(p)
	if err != nil {
		return err
	}
	off := p - pg.base
	off -= uintptr(blockIndex(pg, off)) * pg.bsize
	if off != 0 {
		return fmt.Errorf("%w: %#x is %s into a block", ErrInteriorPointer, p, units.Count(uint64(off), "byte"))
	}
	return fmt.Errorf("%w: %#x is a block freed meanwhile", ErrDoubleFree, p)
}

// pageOf returns the page whose blocks cover address p, or says why there is none: the cold
// half of find and Block, with the errors.
func (g *Group) pageOf(p uintptr) (*page, error) {
	s := g.segmentOf(p)
	if s == nil {
		var err error
		if s, err = g.segmentSlow(p); err != nil {
			return nil, err
		}
	}
	pg := s.huge
	if pg == nil {
		if pg = s.pages[(p-s.base)>>sliceShift].Load(); pg == nil {
			return nil, fmt.Errorf("%w: %#x is in a free page", ErrDoubleFree, p)
		}
	}
	if p < pg.base || p-pg.base >= uintptr(pg.nblocks)*pg.bsize {
		return nil, fmt.Errorf("%w: %#x is outside the page's blocks", ErrNotOwned, p)
	}
	return pg, nil
}

// Block returns the start and the size asked for of the live block that holds address p,
// which may point inside it. It fails with ErrNotOwned for an address outside the arena's
// blocks, and with ErrDoubleFree for one in a free block (or in a free page or chunk). A
// caller checking that a range [p, p+n) lies inside one block tests p+n <= base+size. Frees
// of the block racing with the call are the caller's business.
func (g *Group) Block(p uintptr) (base, size uintptr, err error) {
	pg, idx, base, err := g.blockAt(p)
	if err != nil {
		return 0, 0, err
	}
	if size = pg.liveSize(idx); size == 0 {
		return 0, 0, freeBlockError(p)
	}
	if err := outsideError(p, base, size); err != nil {
		return 0, 0, err
	}
	return base, size, nil
}

// blockAt returns the page, index and start of the block whose slot holds address p, live or
// not: the cold lookup of Block and Hold.
func (g *Group) blockAt(p uintptr) (pg *page, idx uint32, base uintptr, err error) {
	if pg, err = g.pageOf(p); err != nil {
		return nil, 0, 0, err
	}
	idx = blockIndex(pg, p-pg.base)
	return pg, idx, pg.base + uintptr(idx)*pg.bsize, nil
}

// blockIndex is off / pg.bsize for an offset within pg's blocks, by divMul with one correction
// rather than a division (tens of cycles): divMul is 2³²/bsize rounded up, exact for block
// starts, and off at most a segment, so the product's floor is off by one at most.
func blockIndex(pg *page, off uintptr) uint32 {
	if pg.nblocks == 1 {
		return 0
	}
	idx := uint32(uint64(off) * uint64(pg.divMul) >> 32)
	if uintptr(idx)*pg.bsize > off {
		idx--
	}
	return idx
}

// freeBlockError is the error of an address inside a block that is not live.
func freeBlockError(p uintptr) error {
	return fmt.Errorf("%w: %#x is in a free block", ErrDoubleFree, p)
}

// outsideError refuses an address p past the size asked for of the block at base.
func outsideError(p, base, size uintptr) error {
	if p-base >= size {
		return fmt.Errorf("%w: %#x is %d bytes into a block of %d bytes at %#x", ErrNotOwned, p, p-base, size, base)
	}
	return nil
}
