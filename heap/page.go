package heap

import (
	"math/bits"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/bitset"
	"github.com/pinmalloc/pinmalloc/internal/ilist"
	"github.com/pinmalloc/pinmalloc/internal/keep"
)

// page is a run of slices holding blocks of one size. See the package invariants.
type page struct {
	// Owner-only fields, hot first.
	nfree      uint32 // blocks on the free list
	head       uint32 // the free list's first block (by index), when nfree > 0: see freeLink
	alert      uint32 // class pages: a free that brings nfree to it calls pageChanged (watch)
	bump       uint32
	limit      uint32 // blocks below it lie in committed slices (class pages: see extend)
	nblocks    uint32
	base       uintptr
	span       uintptr // nblocks * bsize: the bytes the blocks cover
	bsize      uintptr
	divMul     uint32            // off*divMul>>32 == off/bsize for multiples of bsize
	class      int16             // heap class, or -1 for object and huge pages
	fresh      bool              // blocks from bump read as zero
	dead       bool              // given back: never used again (see the invariants)
	avail      ilist.Links[page] // on its class's available list (hclass.avail) or not
	objSize    atomic.Uintptr    // object and huge pages: the size asked for (Size reads it from any goroutine)
	want       uintptr           // huge pages: bytes from base known committed and wanted in the arena
	kept       keep.Range
	frees      uint64      // class pages: frees, for Stats (see hclass)
	seenOps    uint64      // class pages: allocations and frees at PurgeIdle's last look (purge.go)
	calm       uint32      // class pages: the owner's frees since it last tried reexclusive
	remoteSeen uint32      // class pages: remote frees collected (see keepSharedAfter)
	npurged    uint32      // class pages: purged blocks, on the free list after the nfree committed ones
	ctop       uint32      // class pages: bytes from base that extend has committed (the bump index's reach)
	allIdx     int32       // class pages: index in hclass.all
	reexcl     uint8       // class pages: times reexclusive made it exclusive again
	tracked    bool        // object and huge pages: kept is tracked by the arena (see idle)
	settled    bool        // class pages: purged since seenOps was taken, nothing more to give until it changes
	gone       *bitset.Set // class pages: granules below ctop a purge gave up (fine granules; nil until then)
	nextReturn *page       // borrowed class pages: the next on the lender's returned list (lend.go)

	heap   *Heap
	seg    *segment
	tail   *segment // huge pages whose last chunk they share with object pages (pack.go): its segment
	slice0 int32
	nslice int32 // huge pages with a tail: the slices they take of it

	// Shared with remote freers.
	mode        uint32      // exclusive, sharing or shared (exclusive.go)
	keepShared  atomic.Bool // the page stays shared: other goroutines need not count (exclusive.go)
	holdSeen    holdSeen    // invariants build: a hold shared it once (never exclusive again)
	state       []uint32    // per block: see freedRemote
	remote      []atomicWord
	pending     atomic.Uint32
	nextPending *page
	tags        atomic.Pointer[[]atomic.Uintptr] // per block, made at the page's first hold (tag.go)

	// Written by the counted remote frees (enter), so on a cache line of its own: beside the
	// fields above, which the owner reads on its fast paths, it would bounce that line
	// between a remote freer and the owner at every free.
	_       [64]byte
	sharers atomic.Int32 // other goroutines at work on the state words (enter, leave)
	_       [60]byte
}

// newPage carves a page of nslice slices from s: a class page (its blocks fresh until extend
// finds dirty memory) or, for class -1, an object page of one block.
func newPage(h *Heap, s *segment, slice0, nslice int, bsize uintptr, class int16) *page {
	pg := &page{
		heap: h, seg: s, slice0: int32(slice0), nslice: int32(nslice), bsize: bsize, class: class, fresh: class >= 0,
		base: s.base + uintptr(slice0)<<sliceShift, nblocks: 1, mode: h.newMode(class),
	}
	if pg.mode == shared {
		pg.keepShared.Store(true) // shared from the start: never made exclusive (see reexclusive)
	}
	if class >= 0 {
		pg.nblocks = uint32(uintptr(nslice) << sliceShift / bsize)
		pg.divMul = ^uint32(0)/uint32(bsize) + 1
	}
	pg.span = uintptr(pg.nblocks) * bsize
	pg.state = make([]uint32, pg.nblocks)
	pg.remote = make([]atomicWord, (pg.nblocks+63)/64)
	pg.pieces(func(s *segment, m uint64) {
		for r := m; r != 0; r &= r - 1 {
			s.pages[bits.TrailingZeros64(r)].Store(pg)
		}
		s.free &^= m
		if class >= 0 {
			s.nclass++
		}
		if s.npages++; s.npages == 1 && s.run != nil {
			s.run.used++
			s.recent = false
		}
	})
	return pg
}

// pieces calls f with each segment pg's slices lie in and the mask of them there: one, but for
// an object page that runs on into the next segments of a run (pack.go).
func (pg *page) pieces(f func(s *segment, m uint64)) {
	s, first, n := pg.seg, int(pg.slice0), int(pg.nslice)
	for n > 0 {
		k := min(n, segSlices-first)
		f(s, sliceMask(first, k))
		if n -= k; n > 0 { // not looked up otherwise: a run is its owner's to read
			s, first = s.next(), 0
		}
	}
}

// empty reports whether a class page has no live block and no remote free left to collect.
func (pg *page) empty() bool { return pg.nfree+pg.npurged == pg.bump }

// A block's state word (page.state) says whether it is live and how big it was asked to be:
//
//	0                free: never handed out (above the bump index), or being freed
//	n                live, allocated with n bytes (stateOf(n): objects of 1 GiB or more have
//	                 stateMax, and objSize has their size, as it has every object's)
//	n | held         live and held: no free but FreeHeld takes it back
//	n | freedRemote  freed by another goroutine, for the owner to collect (an object page's
//	                 stays so once collected)
//	freeLink | i     on its class page's free list, whose next block is block i
//
// A class page's free list is threaded through the state words of its free blocks, as
// mimalloc threads its through the blocks themselves: the page holds the first block (head)
// and the count (nfree), and each free block's word names the next. Allocation reads the word
// it then overwrites with n, and a free writes the word it checked: one word, one cache line,
// for each, where a separate stack of free blocks was a second line and a longer chain of
// dependent loads (issue 29). Only the owner writes link words (pushFree) and follows them
// (pop); every other reader sees freedRemote and held both set, which no live word has, and
// refuses the block as free.
//
// The owner writes n at allocation with a plain store: the block is free, so nothing else may
// touch its word, and whoever frees it later has been handed the block through some
// synchronisation that orders the store first. Frees (and Hold) move the word with one
// compare-and-swap, so of racing frees of one block exactly one wins; the others, like any
// later free, find a free state and report ErrDoubleFree. The owner's free of a block of an
// exclusive page, which no other goroutine has touched, is a plain load and store instead;
// the first other goroutine to touch the page shares it first, which keeps the
// one-winner rule. The words are per block, not bits of
// a shared word, so the owner's plain store never overwrites a neighbour's free.
//
// Detection is exact until the block is handed out again: a stale free that arrives after
// that frees the new allocation, which no allocator can tell from a legitimate free. If it
// races with the reallocation, the race detector reports the plain store.
const (
	freedRemote = 1 << 31
	held        = 1 << 30
	freeLink    = freedRemote | held // a free-list word: see above
)

// isLink reports whether state word st is a free-list word.
func isLink(st uint32) bool { return st&freeLink == freeLink }

// stateMax is the largest size a state word holds.
const stateMax = held - 1

// stateOf is the state word of a block allocated with n bytes.
func stateOf(n uintptr) uint32 { return uint32(min(n, stateMax)) }

// freeState moves block idx from live to free (to freedRemote when remote) and returns the
// size word it was live with (without the held bit). When n is not zero, it frees only a block
// allocated with n bytes, in the same compare-and-swap: a size check before it would let a free
// pass that races with another goroutine's allocation of the block. hold is held for
// FreeHeld, which frees only a held block, and 0 for every other free, which frees only one
// that is not held. ok is false when it did not free: the returned word then says why (see
// freeError). An object of 1 GiB or more is checked against objSize before, as its state word
// cannot tell (only a stale free racing its reallocation with another size of 1 GiB or more
// could slip through).
func (pg *page) freeState(idx uint32, remote bool, n uintptr, hold uint32) (old uint32, ok bool) {
	want := stateOf(n)
	if want == stateMax && pg.objSize.Load() != n {
		return atomic.LoadUint32(&pg.state[idx]), false
	}
	w := &pg.state[idx]
	for {
		old = atomic.LoadUint32(w)
		if !freeable(old, want, hold) {
			return old, false
		}
		next := uint32(0)
		if remote {
			next = old&^held | freedRemote
		}
		// Fails only when another free won the race: the next load sees a free state.
		if atomic.CompareAndSwapUint32(w, old, next) {
			return old &^ held, true
		}
	}
}

// freeable reports whether a free may take a block whose state word is old: live, held or not
// as hold says, and allocated with want bytes (0: any).
func freeable(old, want, hold uint32) bool {
	return old != 0 && old&(freedRemote|held) == hold && (want == 0 || old&^held == want)
}

// liveSize returns the size block idx was allocated with, or 0 when it is not live.
func (pg *page) liveSize(idx uint32) uintptr {
	return pg.stateSize(atomic.LoadUint32(&pg.state[idx]))
}

// stateSize returns the size a block whose state word is st was allocated with, or 0 when it
// is not live.
func (pg *page) stateSize(st uint32) uintptr {
	if st&freedRemote != 0 {
		return 0
	}
	if pg.class < 0 && st != 0 {
		return pg.objSize.Load() // the state word caps huge sizes
	}
	return uintptr(st &^ held)
}

// pageList is a class's list of available pages (hclass.avail), linked through page.avail.
type pageList = ilist.List[page]
