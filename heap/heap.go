// Package heap carves an arena into blocks the way mimalloc does, with every piece of
// bookkeeping kept in Go memory so that the same code serves memory the CPU cannot touch.
//
// # Use
//
// Create an arena of 2 MiB chunks (package arena) and a heap over it with New; Alloc returns
// the address of a block of at least n bytes, aligned to Options.Align, and Free gives it back:
//
//	h, err := heap.New(a, heap.Options{Align: 256})
//	p, err := h.Alloc(1000) // an address (uintptr), not a slice: the memory may be VRAM
//	err = h.Free(p)
//	err = h.Close()
//
// A Heap has one owner goroutine; any goroutine may free a block through the heap's Group
// (h.Group().Free(p)), and several heaps that share one arena are made with NewGroup and
// Group.NewHeap. Errors match sentinels with errors.Is (ErrDoubleFree, ErrNotOwned,
// ErrOutOfMemory, ...). Stats reports the heap's memory and Trim gives back what it does not
// use. Package pinned and package device are the fronts most users want instead; the rest of
// this comment is the design.
//
// # Layout
//
// A segment is one 2 MiB arena chunk cut into 64 slices of 32 KiB. A page is a run of slices in
// one segment holding blocks of one size class: small pages (64 KiB) for blocks up to 8 KiB,
// medium pages (512 KiB) up to 64 KiB, large pages (the whole segment) up to 256 KiB. A
// segment holds pages of one kind only, so that small pages never fragment the room that large
// ones need. A page commits its memory as its bump index reaches it, and gives
// back, where the arena's granule is a host page, what its free blocks do not share with live
// ones once it has stayed unused for the purge delay, or at Trim. Requests above
// 256 KiB and up to 1 MiB get a page of their own (an "object" page: one block of whole
// slices) in an object segment; larger ones are huge objects, a run of chunks straight from
// the arena, committed only as far as they reach, with no cap below the arena's capacity.
// Size classes are generated, eight to each doubling, so no request over 128 B
// wastes more than 12.5 % of its block.
//
// # Kept object pages and huge objects
//
// A freed object page or huge object is kept (a few of them) for the next request of about
// its size. Its memory is a kept range of the arena, tracked from the page's first free until it is
// dropped: a free marks it idle and a reuse claims it back, one atomic operation each and no
// arena call, so such a pair costs about what a class pair costs. The arena's purge timer
// gives up a range left idle for the purge delay (decommits it) with no help from the heap,
// so an idle heap does not keep memory locked; Trim, a forced purge and dropping the page
// (Trim, Close, a full keep list, a huge miss) give it up at once. A reuse that finds its
// range given up commits it again, as a new page would.
//
// # Bookkeeping off the region
//
// mimalloc threads its free lists through the blocks themselves. Here nothing is ever written
// into the region: a page keeps a state word per block (live with the size asked for, or free
// and then, on the page's free list, naming the next free block: the list mimalloc threads
// through the blocks, threaded through the words), a bump index for blocks never handed out
// and a remote-free bitmap, all in Go memory: 4 bytes and a bit per block. Addresses map to
// pages through the arena's ChunkID (base-relative, O(1)) and the segment's slice table. So
// device memory, managed memory and host memory are all served by this one code path, and
// alignment is arithmetic on offsets.
//
// # Ownership and concurrency
//
// A Heap has one owner at a time: Alloc, Free of its own blocks, Collect, Stats, Trim and Close
// take no lock and must not run concurrently with each other. Frees may come from any
// goroutine through Group.Free (or Heap.Free of another heap's block): they are lock-free. Any
// free moves the block's state word out of the live states with one compare-and-swap, which
// detects a double free exactly, even between racing goroutines; the owner's
// allocation is a plain store, and so is the owner's free on a page no other goroutine has
// touched. A remote free then sets the block's bit in the page's remote
// bitmap with one atomic OR and, the first time, pushes the page onto its owner's lock-free
// pending stack. The owner collects pending pages when it runs out of free blocks — mimalloc's
// thread_free, with bits instead of links.
//
// Where memory commits a chunk at a time, a heap may take the room for its class pages from
// another heap's segments while that heap's owner lets it (SetLender): the page is the
// borrower's, its segment stays the lender's, and the page's room goes back to the lender when
// the borrower gives the page up. Close the borrowers first: a lender's Close fails with ErrLent,
// releasing nothing, while a borrower holds pages in its runs.
//
// Invariants, for every page p:
//   - a block is live iff its state word is live; exactly one free moves it out;
//   - a block is in at most one of: the free list (p.nfree committed blocks, then p.npurged
//     purged ones, from p.head, linked through their state words),
//     the set bits of p.remote or [p.bump, p.nblocks); live blocks are in none, and only
//     blocks on the free list have link words;
//   - p.bump - p.nfree - p.npurged counts live blocks plus remotely freed blocks not yet
//     collected; a page is given back only when that is zero, so a remote free never races
//     with its release;
//   - the memory of a class page's live blocks, committed free blocks and blocks in
//     [p.bump, p.limit) is committed;
//   - an exclusive page has no remote bit set and no block freed remotely or
//     held: no goroutine but the owner has touched its state words since it last became
//     exclusive; one that had a block held never becomes exclusive again (history, not
//     state: the invariants build records each page's holds and checks it), and another
//     becomes so again only when no other goroutine is at work on it;
//   - an entry of the owner's page cache names a live class page of the heap;
//   - a small class's spare is an empty page of the class on its available
//     list, not its current page;
//   - a kept object or huge page is tracked from its first free until dropped;
//     while kept its range is idle or given up, never busy; a live one's range is busy and
//     committed (object pages: all their slices known committed; huge: committed as far as
//     the request reaches). A held
//     heap (RetainSegments) keeps no huge page and tracks no object page: its kept object
//     pages stay committed, as they were left;
//   - page and segment structs are never reused, so a stale pointer held by a buggy double free
//     sees only free states and reports ErrDoubleFree; a released page is marked dead, and a
//     stale pending-stack entry for it is ignored.
//
// The heap's self-check verifies them all, with the counts that rest on them and the agreement
// of the group's two lookup tables. Built with the tag invariants, Collect and Trim check them
// and the property and fuzz tests check them after every step: go test -tags invariants ./heap;
// under -race (internal/invariants.Enabled) they do at one step in invariants.RaceEvery.
//
// Lock order: Heap (owner, no lock) → arena.Arena.mu. Remote frees take no lock at all.
//
// # When memory changes owner
//
// The heap knows nothing of CUDA streams, but its fronts order memory on them (device's
// stream heaps, pinned's buffers with copies queued), and memory that changes owner while a
// stream still uses it is corrupted silently. The rule the fronts build on: every move of
// memory to another owner (another heap, the arena, the provider by a decommit) happens where
// the front can order it, or does not happen. Each path, and why it is safe:
//
//   - A free (Free, FreeSized, TryFree, Group.Free, FreeHeld) makes a block free in its own
//     heap. A front whose blocks something else may still use holds them (Hold) and frees
//     them only once that use has ended (pinned), or frees on the stream's behalf and keeps
//     reuse on that stream (device, with RetainSegments).
//   - A Zalloc whose clear fails frees nothing: the clear may still run (arena.Zeroer), so the
//     block stays live, set aside (Stats.Uncleared), until its owner, once no clear can still
//     write it (a synchronize of the context), frees it with ReleaseUncleared. Only a clear
//     that failed before it began (arena.ErrNotStarted: nothing queued) has its block freed.
//   - Collect, and the class's spare page, the page cache and exclusive pages move
//     nothing to another heap: they reuse the heap's own free blocks and pages.
//   - An empty page goes back to its segment, in the same heap. An empty segment, freed kept
//     object pages and huge objects go to the arena (RetainSpare), where any heap of the group
//     may take them, and their memory to the arena's purge; a RetainSegments heap keeps all of
//     them, committed, never trims itself (not even with the arena full) and
//     gives nothing to the purge: only its owner's Trim, ReleaseSpares or Close moves its
//     memory, and the owner calls them once nothing uses it (device synchronizes the stream,
//     or sees it pass a point recorded after the frees).
//   - The arena decommits only memory no span wants (the purge, Trim): memory the heaps gave
//     back by the paths above.
//
// # For fronts
//
// Alloc, Free (FreeSized), Group.Free, Stats, Trim and Close are what a plain user needs. A
// front that builds its own allocator on a group of heaps (package pinned does: a pool's shards
// are the group's heaps) uses a few more, exported for it across the package boundary:
//   - TryAlloc, TryFree and TryFreeHeld: the owner's non-blocking entry points, what
//     Alloc, FreeSized and FreeHeld do when that needs no arena call, no lock and no
//     allocation, for an owner that must not block (pinned runs them pinned to a processor)
//     and falls back to the blocking calls when they refuse;
//   - Collect: the owner takes in the frees other goroutines made when it chooses
//     (pinned does before it maps its blocks) rather than when a class runs dry;
//   - Index: the heap's number in its group, to index a front's per-heap table (pinned's
//     shards) from the heap a block belongs to;
//   - Group.OwnPageMin and Group.Coarse: the requests that take a page of their own, which a
//     front with several heaps may send to one where memory is coarse, so that their chunks
//     are shared (pinned's big shard);
//   - SpareMark and ReleaseSpares: a held heap's owner gives back the empty segments it kept
//     at a mark, once the outside work that may use them has passed a point after the mark
//     (device's idle purge, for a busy stream heap);
//   - Group.Hold, Group.HoldSized, Group.FreeHeld and Heap.FreeHeld: a held block
//     stays live whatever frees it, until its holder takes it back, for a front whose blocks
//     something outside the heap may still use after the user freed them (pinned's buffers
//     with a CUDA stream's copy queued).
package heap

//go:generate go run mksizeclasses.go

import (
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/align"
	"github.com/pinmalloc/pinmalloc/internal/bitset"
	"github.com/pinmalloc/pinmalloc/internal/keep"
)

const (
	sliceShift = 15
	sliceSize  = 1 << sliceShift
	segShift   = 21
	segSize    = 1 << segShift
	segSlices  = segSize / sliceSize // 64: one bit each in a uint64
	// DefaultAlign is the alignment every block meets when Options.Align is zero: a cache line.
	DefaultAlign = 64
)

// The heap's geometry, for the packages above it.
const (
	// MaxClassSize is the largest size class: a request up to it gets a block in a page shared
	// with blocks of its class; a larger one gets a page (or a chunk run) of its own.
	MaxClassSize = maxClassSize
	// HugeThreshold is the largest object page, half a segment: a request above it (or one
	// aligned beyond what a segment can place) is a huge object, a run of arena chunks of its
	// own, which a free hands to the arena (or keeps, see Retention) rather than to a segment.
	HugeThreshold = segSize / 2
)

// Retention says what a heap keeps of the memory its frees empty.
type Retention uint8

const (
	// RetainSpare, the default, keeps one empty segment and a few freed object pages and huge
	// objects for reuse (their memory goes to the arena's purge unless reused in time), and
	// gives the rest back to the arena, where any heap of the group may take it.
	RetainSpare Retention = iota
	// RetainSegments keeps every empty segment with the heap until Trim, ReleaseSpares or
	// Close, so memory freed in the heap's segments is reused by this heap alone until then:
	// the heap never trims itself (not even when the arena is full), and its frees give
	// nothing to the arena's purge (free slices and kept object pages stay committed), since
	// a decommit hands the memory back to the provider whatever still uses it. Its owner
	// calls Trim once nothing outside the heap uses its free memory (device synchronizes the
	// stream, or sees it pass a point), or ReleaseSpares for the empty segments of a mark.
	// It keeps no freed huge object: those go back to the arena at once, so that whoever
	// frees one decides when others may reuse it.
	RetainSegments
)

// Options configures a Heap.
type Options struct {
	// Align is the mandated alignment of every block: a power of two from 16 B up to 32 KiB.
	// 64 (a cache line) by default; 256 suits GPU coalescing, 4096 O_DIRECT and DMA.
	Align uintptr
	// Retention says what the heap keeps of the memory its frees empty (default RetainSpare).
	Retention Retention
}

// Heap is a single-owner allocator over an arena. See the package documentation for the rules.
type Heap struct {
	g     *Group
	a     *arena.Arena
	z     arena.Zeroer // a's provider's, or nil: Zalloc's clears (alloc.go)
	kt    keep.Tracker // a's kept-range calls
	kc    *keep.Clock  // a's purge clock, which marks kept ranges idle with no call
	align uintptr

	// What the fast paths touch, together: the counters, then the tables of request size →
	// heap class → current page.
	live, peak    uintptr // bytes asked for, by live blocks
	allocs, frees uint64
	freeSeq       uint32 // odd while the owner frees on an exclusive page (exclusive.go)
	small         [smallMax/16 + 1]uint8
	direct        [directMax/16 + 1]*page // the current page of a request of up to directMax, by (n+15)/16 (setCur)
	classOf       [numClasses]uint8       // generated class → heap class (sizes rounded up to align)
	cur           [256]*page              // per heap class (a uint8: no bounds check); never nil below len(classes)
	classes       []hclass
	near          [nearLen]nearEntry // the owner's class pages by address (near.go)

	segs    [numSegKinds]segList // segments with room, per kind
	spares  []*segment           // empty segments kept to damp churn (all of them when hold)
	spareN  uint64               // segments made spares so far: the next one's spareAt (spare.go)
	hold    bool                 // Retention is RetainSegments
	objFree []*page              // freed object pages kept for reuse, oldest first (in keptBuf)
	objKeep int                  // the most objFree holds: maxObjFree, packedObjFree where packed
	bigFree []*page              // freed huge objects kept for reuse, oldest first (in keptBuf)
	pending pendingStack         // pages with remote frees, pushed by other goroutines

	// Whether new class pages start shared (exclusive.go): remote frees collected, and where
	// the last decision was taken.
	remoteFrees, modeFrees, modeRemote uint64
	remoteMostly                       bool

	// Scratch space of the purge (purge.go), kept between calls.
	scratch, scratch2, scratch3 []uint32
	runScratch                  [][2]int
	freeBits                    bitset.Set
	emptyScratch                []*page

	objMax uintptr    // the largest object page: HugeThreshold, or more where memory is coarse (pack.go)
	packed bool       // memory is coarse and the heap gives it back: it packs (pack.go)
	runs   []*run     // the runs of segments of a packed heap
	lender RoomLender // who lends room for the class pages (lend.go), or nil

	returned     atomic.Pointer[page] // pages h lent, given back while h was busy (lend.go)
	nlent        int                  // pages h lent not taken back yet, by h's owner or one lending h (lend.go)
	nsegs, nhuge int
	checks       uint32 // calls of checkInvariants (invariants.Due)
	index        int
	closed       bool
	noBlock      bool // a non-blocking path (try.go) runs: refuse what needs the arena
	tight        bool // the arena refused a commit for want of memory: pages commit block by block
	deferred     bool // a non-blocking path left an empty page on an available list

	uncleared []unclearedBlock // blocks whose clear failed, set aside (uncleared.go)

	// keptBuf holds objFree's and bigFree's entries, which a pair of a large size writes at
	// every Alloc and Free: inside the heap, so that no other heap's line holds them. Made
	// apart, their 32 and 16 bytes came from the Go allocator side by side with the next
	// heap's, and two goroutines' pairs of 1 MiB, each on its own heap, wrote one cache line:
	// 50 to 70 ns a pair each, against 28 alone (TestKeptListsApart). Last, so that it moves
	// no other field: beside objFree, a 4 MiB pair took 3 % longer.
	keptBuf [maxObjFree + maxBigFree]*page
}

// hclass is one of the heap's size classes: a generated class rounded up to the heap's
// alignment (several generated classes may share one).
//
// Its operations are counted per page (page.frees: the page is at hand on the fast paths, the
// class is one more load; a page's allocations are its frees plus bump - nfree, so the
// allocation path counts nothing there), and summed by Stats over the class's pages and what
// the pages given back had counted.
type hclass struct {
	size   uintptr
	kind   segKind
	slices uint8     // per page
	made   uint8     // pages made since PurgeIdle's last look, up to 2 (packed medium classes)
	direct [2]uint16 // the indices of Heap.direct that name this class's current page: [lo, hi)
	empty  page      // sentinel current page: no blocks
	avail  pageList  // pages with free blocks, a new one first, refilled ones last
	spare  *page     // an empty page kept on avail (small classes: see pageChanged)
	all    []*page   // every page of the class; page.allIdx is its index
	allocs uint64    // operations counted by pages given back
	frees  uint64
}

// retire takes a page that is being given back out of the class, keeping its counts.
func (cl *hclass) retire(pg *page) {
	cl.allocs += pg.allocs()
	cl.frees += pg.frees
	last := cl.all[len(cl.all)-1]
	cl.all[pg.allIdx], last.allIdx = last, pg.allIdx
	cl.all = cl.all[:len(cl.all)-1]
}

// allocs returns the allocations a class page has served: every one is still live (below
// bump and off the free list) or has been freed (and collected).
func (pg *page) allocs() uint64 { return pg.frees + uint64(pg.bump-pg.nfree-pg.npurged) }

// counts returns the class's operations so far.
func (cl *hclass) counts() (allocs, frees uint64) {
	allocs, frees = cl.allocs, cl.frees
	for _, pg := range cl.all {
		allocs += pg.allocs()
		frees += pg.frees
	}
	return allocs, frees
}

// New creates a heap over an arena in a group of its own. Use a Group to let several heaps
// share one arena and free each other's blocks.
func New(a *arena.Arena, o Options) (*Heap, error) {
	g, err := NewGroup(a)
	if err != nil {
		return nil, err
	}
	return g.NewHeap(o)
}

func newHeap(g *Group, o Options) (*Heap, error) {
	if o.Align == 0 {
		o.Align = DefaultAlign
	}
	if !align.IsPow2(o.Align) || o.Align < 16 || o.Align > sliceSize {
		return nil, fmt.Errorf("%w: heap alignment %d (want a power of two from 16 to %d)", ErrInvalidAlign, o.Align, sliceSize)
	}
	if o.Retention > RetainSegments {
		return nil, fmt.Errorf("%w: retention %d", ErrInvalidArgument, o.Retention)
	}
	if ca := g.chunkAlign; o.Align > ca {
		return nil, fmt.Errorf("%w: heap alignment %d exceeds the arena's chunk alignment %d", ErrInvalidAlign, o.Align, ca)
	}
	kt := keep.Of(g.a)
	h := &Heap{g: g, a: g.a, kt: kt, kc: kt.Clock(), align: o.Align, hold: o.Retention == RetainSegments, index: int(g.nheaps.Add(1) - 1),
		objMax: HugeThreshold}
	h.z, _ = g.a.Provider().(arena.Zeroer)
	h.objFree = h.keptBuf[:0:maxObjFree] // TryFree appends within capacity
	h.bigFree = h.keptBuf[maxObjFree:maxObjFree:len(h.keptBuf)]
	h.packed = g.coarse && !h.hold
	h.objKeep = maxObjFree
	if h.packed {
		h.objKeep = packedObjFree
		h.objMax = segSize // a run's chunk, where a block must lie inside one commit
		if g.packRuns {
			h.objMax = runChunks << segShift / 2
		}
	}
	// Round every generated class up to the alignment; merge equal sizes.
	for c := 0; c < numClasses; c++ {
		size, _ := align.Up(uintptr(classSize[c]), o.Align)
		if n := len(h.classes); n == 0 || h.classes[n-1].size != size {
			kind, slices := classKind[c], classSlices[c]
			switch {
			case h.packed && kind == segLarge:
				kind, slices = segObject, 0 // object pages: pack.go
			case h.packed && kind == segMedium:
				slices = segSlices / 8
			}
			h.classes = append(h.classes, hclass{size: size, kind: kind, slices: slices})
		}
		h.classOf[c] = uint8(len(h.classes) - 1)
	}
	for i := range h.small {
		h.small[i] = h.classOf[smallClass[i]]
	}
	for i := range h.direct {
		c := h.small[0]
		if i > 0 {
			c = h.class(uintptr(i) * 16) // every request of (i-1)*16+1 to i*16 bytes is of its class
		}
		if cl := &h.classes[c]; cl.direct[1] == 0 {
			cl.direct = [2]uint16{uint16(i), uint16(i + 1)}
		} else {
			cl.direct[1] = uint16(i + 1) // classes grow with sizes: each class's indices are a run
		}
	}
	for i := range h.classes {
		h.setCur(uint8(i), &h.classes[i].empty)
	}
	return h, nil
}

// Align returns the heap's mandated block alignment.
func (h *Heap) Align() uintptr { return h.align }

// Index returns the heap's number in its group: 0 for the first made, then 1, 2 and so on. A
// front that keeps per-heap state (a lock, say) can index a table with it.
func (h *Heap) Index() int { return h.index }

// Group returns the heap's group.
func (h *Heap) Group() *Group { return h.g }

// Arena returns the heap's arena.
func (h *Heap) Arena() *arena.Arena { return h.a }

// Close gives every segment back to the arena. It collects pending remote frees first and fails
// with ErrLiveBlocks, releasing nothing, while blocks are still live (those a failed Zalloc set
// aside among them, until ReleaseUncleared), and with ErrLent while a heap that borrows from
// this one (SetLender) holds pages in its runs; the heap stays usable.
func (h *Heap) Close() error {
	if h.closed {
		return ErrClosed
	}
	h.Collect()
	if n, bytes := h.liveBlocks(); n > 0 {
		if k := len(h.uncleared); k > 0 {
			return fmt.Errorf("%w: %d blocks, %d bytes (%d of them set aside by a failed clear,"+
				" until ReleaseUncleared)", ErrLiveBlocks, n, bytes, k)
		}
		return fmt.Errorf("%w: %d blocks, %d bytes", ErrLiveBlocks, n, bytes)
	}
	h.takeBackReturned()
	if h.nlent > 0 {
		// Closed, it would never take back the room they give back while another goroutine
		// holds it (its returned list), and their chunks would stay out of the arena for good.
		return fmt.Errorf("%w: %d pages of this heap's runs are a borrower's (SetLender): close the borrowers first",
			ErrLent, h.nlent)
	}
	h.releaseEmpty()
	h.closed = true
	return nil
}

// liveBlocks counts the blocks still allocated.
func (h *Heap) liveBlocks() (n uint64, bytes uintptr) {
	return h.allocs - h.frees, h.live
}
