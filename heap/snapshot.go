package heap

import (
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
)

// Read-only views of a group's segments for observers (the debug page, leak hunting). They read
// owner-only fields of every heap of the group, so the caller must be the owner of all of them
// while it calls (pinned.Pool and device.Heap hold the locks that make them so). Blocks freed
// from other goroutines meanwhile are seen exactly: a block's state word is read atomically.

// ChunkKind is what a chunk of a group's arena holds.
type ChunkKind uint8

const (
	// ChunkFree is a chunk no heap of the group holds (the arena says whether it is handed
	// out to someone else, or committed).
	ChunkFree ChunkKind = iota
	// ChunkSmall, ChunkMedium and ChunkLarge are segments of class pages of 64 KiB, 512 KiB
	// and 2 MiB.
	ChunkSmall
	ChunkMedium
	ChunkLarge
	// ChunkObject is a segment of object pages (one block of whole 32 KiB slices each).
	ChunkObject
	// ChunkHuge is a chunk of a huge object (a run of chunks of its own).
	ChunkHuge
	// ChunkPacked is a segment of pages of every kind, of memory that commits a chunk at a time
	// (CUDA's VMM granules): its object pages may begin in the chunk before it.
	ChunkPacked
)

var chunkKindNames = [...]string{"free", "small", "medium", "large", "object", "huge", "packed"}

// String names the kind.
func (k ChunkKind) String() string {
	if int(k) < len(chunkKindNames) {
		return chunkKindNames[k]
	}
	return "unknown"
}

// SliceSize is the unit pages are made of: a segment is 64 slices.
const SliceSize = sliceSize

// PageInfo describes one page of a segment.
type PageInfo struct {
	// Slice is the page's first slice in its segment and Slices its length in slices.
	Slice, Slices int
	// BlockSize is the size of its blocks (the whole page for an object page); Blocks how many
	// it holds, Live how many are live and LiveBytes the bytes asked for by them.
	BlockSize uint64
	Blocks    int
	Live      int
	LiveBytes uint64
	// Tail reports slices of a page that began in an earlier chunk, which reports it (where
	// memory commits a chunk at a time, an object page may run on from one chunk into the
	// next, and a huge object shares its last chunk with object pages).
	Tail bool
}

// ChunkInfo describes what a group holds in one chunk.
type ChunkInfo struct {
	Kind ChunkKind
	// Pages lists a segment's pages in slice order (nil for huge and free chunks).
	Pages []PageInfo
	// HugeFirst reports the first chunk of a huge object; HugeChunks is its length in chunks
	// and HugeSize the bytes asked for (zero while the heap keeps it freed for reuse).
	HugeFirst  bool
	HugeChunks int
	HugeSize   uint64
}

// Block is a live block.
type Block struct {
	// Addr is its address and Size the bytes asked for; BlockSize the bytes it occupies (its
	// size class, an object page's slices, a huge object's chunk run).
	Addr      uintptr
	Size      uint64
	BlockSize uint64
	Kind      ChunkKind
}

// Map is a consistent picture of a group's arena and of what its heaps hold in it.
type Map struct {
	Arena arena.Snapshot
	// Chunks has, for each region of Arena, one entry per chunk.
	Chunks [][]ChunkInfo
}

// Map returns the arena's snapshot and what the group holds in each chunk. The caller owns
// every heap of the group (see above).
func (g *Group) Map() Map {
	m := Map{Arena: g.a.Snapshot()}
	for _, r := range m.Arena.Regions {
		cs := make([]ChunkInfo, len(r.Chunks))
		for i := range cs {
			cs[i] = g.chunkInfo(r.FirstID + arena.ChunkID(i))
		}
		m.Chunks = append(m.Chunks, cs)
	}
	return m
}

func (g *Group) chunkInfo(id arena.ChunkID) ChunkInfo {
	s := g.segmentAt(id)
	if s == nil {
		return ChunkInfo{}
	}
	if s.kind == segHuge {
		ci := ChunkInfo{Kind: ChunkHuge, HugeFirst: id == s.span.ID, HugeChunks: s.span.N}
		if pg := s.huge; pg != nil && pg.liveBlock(0) {
			ci.HugeSize = uint64(pg.objSize.Load())
		}
		return ci
	}
	ci := ChunkInfo{Kind: s.chunkKind()}
	for i := 0; i < segSlices; {
		pg := s.pages[i].Load()
		if pg == nil {
			i++
			continue
		}
		if pg.seg != s { // a page begun in another segment: that segment reports it
			j := s.runOf(pg, i)
			ci.Pages = append(ci.Pages, PageInfo{Slice: i, Slices: j - i, BlockSize: uint64(pg.bsize), Blocks: int(pg.nblocks), Tail: true})
			i = j
			continue
		}
		pi := PageInfo{Slice: int(pg.slice0), Slices: int(pg.nslice), BlockSize: uint64(pg.bsize), Blocks: int(pg.nblocks)}
		pg.eachLive(func(idx uint32, size uintptr) {
			pi.Live++
			pi.LiveBytes += uint64(size)
		})
		ci.Pages = append(ci.Pages, pi)
		i = s.runOf(pg, i)
	}
	return ci
}

// chunkKind is what a segment's chunk holds.
func (s *segment) chunkKind() ChunkKind {
	if s.kind == segPacked {
		return ChunkPacked
	}
	return ChunkSmall + ChunkKind(s.kind-segSmall)
}

// runOf returns the slice past the slices of s from i on that page pg holds.
func (s *segment) runOf(pg *page, i int) int {
	for i < segSlices && s.pages[i].Load() == pg {
		i++
	}
	return i
}

// liveBlock reports whether block idx is live (allocated, not freed by anyone).
func (pg *page) liveBlock(idx uint32) bool {
	st := atomic.LoadUint32(&pg.state[idx])
	return st != 0 && st&freedRemote == 0
}

// eachLiveMidway, when set (by a test), runs in eachLive between its read of a live block's
// state word and its call of f: where another goroutine's free of the block may land.
var eachLiveMidway func(pg *page, idx uint32)

// eachLive calls f for every live block of pg with the size asked for it. The caller owns pg.
func (pg *page) eachLive(f func(idx uint32, size uintptr)) {
	n := pg.nblocks
	if pg.class >= 0 {
		n = min(pg.bump, pg.nblocks) // blocks at and past the bump index were never handed out
	}
	for idx := uint32(0); idx < n; idx++ {
		// One read of the word says both that the block is live and its size: a free by
		// another goroutine (which takes no lock) may change it at any moment.
		st := atomic.LoadUint32(&pg.state[idx])
		if st == 0 || st&freedRemote != 0 {
			continue
		}
		if eachLiveMidway != nil {
			eachLiveMidway(pg, idx)
		}
		f(idx, pg.stateSize(st))
	}
}

// Blocks calls f for every live block of the group's heaps, in address order within each
// region, until f returns false. The caller owns every heap of the group (see above).
func (g *Group) Blocks(f func(Block) bool) {
	snap := g.a.Snapshot()
	for _, r := range snap.Regions {
		for i := range r.Chunks {
			id := r.FirstID + arena.ChunkID(i)
			if s := g.segmentAt(id); s != nil && !g.eachBlockOf(s, id, f) {
				return
			}
		}
	}
}

// eachBlockOf calls f for the live blocks of segment s seen from chunk id (a huge object only
// from its first chunk) and reports whether to go on.
func (g *Group) eachBlockOf(s *segment, id arena.ChunkID, f func(Block) bool) bool {
	if s.kind == segHuge {
		if pg := s.huge; pg != nil && id == s.span.ID && pg.liveBlock(0) {
			return f(Block{Addr: pg.base, Size: uint64(pg.objSize.Load()), BlockSize: uint64(pg.bsize), Kind: ChunkHuge})
		}
		return true
	}
	kind := s.chunkKind()
	for i := 0; i < segSlices; {
		pg := s.pages[i].Load()
		if pg == nil {
			i++
			continue
		}
		if pg.seg != s { // a page begun in another segment: that segment reports its blocks
			i = s.runOf(pg, i)
			continue
		}
		more := true
		pg.eachLive(func(idx uint32, size uintptr) {
			if more {
				more = f(Block{Addr: pg.base + uintptr(idx)*pg.bsize, Size: uint64(size), BlockSize: uint64(pg.bsize), Kind: kind})
			}
		})
		if !more {
			return false
		}
		i = s.runOf(pg, i)
	}
	return true
}

// BlockCursor is where a walk of a group's blocks in batches (BlocksFrom) goes on: the chunk
// and the slice in it. The zero value starts at the first chunk.
type BlockCursor struct {
	chunk arena.ChunkID
	slice int
}

// BlocksFrom calls f for the live blocks from c on, in chunk order (address order within each
// region), and stops at the end of the page (or huge object) on which f has been called max times
// or more; it moves c past what it walked and reports whether the walk is done. The caller owns
// every heap of the group during each call (see above), not between calls: that is the point, an
// observer walks a big group a batch at a time, letting the heaps' owners work in between. So a
// walk is consistent page by page, not as a whole: blocks allocated or freed between two calls are
// seen or not depending on whether their page had been walked.
func (g *Group) BlocksFrom(c *BlockCursor, max int, f func(Block)) (done bool) {
	n := 0
	for end := arena.ChunkID(g.a.MaxChunks()); c.chunk < end; c.chunk, c.slice = c.chunk+1, 0 {
		l := g.dir[c.chunk>>leafShift].Load()
		if l == nil {
			c.chunk |= leafChunks - 1 // no segment in this leaf: on to the next
			continue
		}
		s := l[c.chunk&(leafChunks-1)].Load()
		if s == nil {
			continue
		}
		if s.kind == segHuge {
			if pg := s.huge; pg != nil && c.slice == 0 && c.chunk == s.span.ID && pg.liveBlock(0) {
				f(Block{Addr: pg.base, Size: uint64(pg.objSize.Load()), BlockSize: uint64(pg.bsize), Kind: ChunkHuge})
				n++
			}
			c.slice = segSlices
		}
		kind := s.chunkKind()
		for c.slice < segSlices {
			pg := s.pages[c.slice].Load()
			if pg == nil {
				c.slice++
				continue
			}
			if pg.seg != s { // a page begun in another segment: that segment reports its blocks
				c.slice = s.runOf(pg, c.slice)
				continue
			}
			pg.eachLive(func(idx uint32, size uintptr) {
				f(Block{Addr: pg.base + uintptr(idx)*pg.bsize, Size: uint64(size), BlockSize: uint64(pg.bsize), Kind: kind})
				n++
			})
			c.slice = s.runOf(pg, c.slice)
			if n >= max {
				return false
			}
		}
		if n >= max {
			c.chunk, c.slice = c.chunk+1, 0
			return c.chunk >= end
		}
	}
	return true
}
