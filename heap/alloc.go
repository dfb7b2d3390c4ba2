// The owner's allocation paths: the fast path (a size class's current page: a free-list pop
// or a bump, a plain store of the state word, no atomic operation), and the slow path that
// finds or makes a page. Requests above the largest class are in object.go.

package heap

import (
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/align"
)

// Alloc returns the address of a block of at least n bytes that meets the heap's alignment.
// Its contents are undefined. It fails with ErrInvalidSize for n == 0, ErrTooLarge above what
// the arena can ever hold (its capacity; less over an External region: see AllocAligned) and
// an error wrapping arena.ErrCapacity when the arena is full.
func (h *Heap) Alloc(n uintptr) (uintptr, error) {
	if n-1 < maxClassSize {
		var pg *page
		if n <= directMax {
			pg = h.direct[(n+15)>>4] // one load, as mimalloc's pages_free_direct (setCur)
		} else {
			pg = h.cur[h.class(n)]
		}
		if idx, ok := pg.pop(); ok {
			return h.take(pg, idx, n), nil
		}
		p, _, err := h.allocSlow(n, h.class(n))
		return p, err
	}
	p, _, err := h.allocBig(n, h.align)
	return p, err
}

// directMax is the largest request whose page Heap.direct names: a request up to it finds its
// class's current page in one load, with no class lookup and no branch on its size (mimalloc's
// direct table stops at 1 KiB; beyond it a request of mixed sizes paid the class arithmetic
// and a mispredicted branch: issue 29). The table is 4 KiB of the heap's.
const directMax = 8 << 10

// setCur makes pg the current page of class c, in cur and in direct.
func (h *Heap) setCur(c uint8, pg *page) {
	old := h.cur[c]
	h.cur[c] = pg
	d := h.classes[c].direct
	for i := d[0]; i < d[1]; i++ {
		h.direct[i] = pg
	}
	h.watch(old)
	h.watch(pg)
}

// watch sets pg.alert, the count of free blocks at which a free of the owner's must call
// pageChanged: 0 for a class page off its class's available list (its next free puts it back
// on), its bump index for one on the list but not current (the free that empties it), and
// never for the current page. So the free paths test one field of the page's first line, where
// they tested the list, the class's current page and the bump index. It runs wherever the first
// two change (setCur, the list's Remove and Push); the bump index moves only in pop, on the
// current page, whose alert does not depend on it. The invariants check every page's alert.
func (h *Heap) watch(pg *page) {
	if pg != nil && pg.class >= 0 && pg.nblocks != 0 { // not a class's sentinel
		pg.alert = h.alertOf(pg)
	}
}

// alertOf is the alert watch gives class page pg.
func (h *Heap) alertOf(pg *page) uint32 {
	switch {
	case !pg.avail.Linked():
		return 0
	case h.cur[pg.class] == pg:
		return math.MaxUint32
	}
	return pg.bump - pg.npurged // the free that empties it
}

// pop takes a free block of the page, if it has one: from its free list, else its bump index.
// It returns the block's index. It is the fast path of Alloc and TryAlloc.
func (pg *page) pop() (uint32, bool) {
	if k := pg.nfree; k > 0 {
		idx := pg.head
		pg.nfree = k - 1
		pg.head = pg.state[idx] &^ freeLink // the next block (not one when the list is empty now)
		return idx, true
	}
	if pg.bump < pg.limit {
		pg.bump++
		return pg.bump - 1, true
	}
	return 0, false
}

// class returns the heap class of a request of 1 to maxClassSize bytes.
func (h *Heap) class(n uintptr) uint8 {
	if n <= smallMax {
		return h.small[(n+15)>>4]
	}
	// Eight classes to each doubling above 128 B: find the doubling, then the eighth.
	l := uint(bits.Len64(uint64(n-1))) - 1
	return h.classOf[8+(l-7)*8+uint((n-1-1<<l)>>(l-3))]
}

// take marks block idx of pg live and returns its address. (The page counts no allocations:
// they are its frees plus bump - nfree, see hclass.)
func (h *Heap) take(pg *page, idx uint32, n uintptr) uintptr {
	takeStore(&pg.state[idx], uint32(n)) // see freedRemote
	h.allocs++
	h.live += n
	if h.live > h.peak {
		h.peak = h.live
	}
	return pg.base + uintptr(idx)*pg.bsize
}

// Zalloc is Alloc with the block cleared. The clear is skipped when the block is fresh from the
// provider and known to read as zero. When the provider's clear fails, the clear may still run
// later (arena.Zeroer): Zalloc returns its error and sets the block aside, reused by no one
// until the owner calls ReleaseUncleared (Stats.Uncleared counts such blocks). A clear whose
// error wraps arena.ErrNotStarted wrote nothing and will write nothing: the block is freed.
func (h *Heap) Zalloc(n uintptr) (uintptr, error) {
	p, fresh, err := h.alloc(n, h.align)
	if err != nil || fresh {
		return p, err
	}
	if h.z == nil { // the provider cannot clear memory: arena.Zero says so, having written nothing
		err := h.a.Zero(p, n)
		_ = h.Free(p)
		return 0, err
	}
	// A live block is committed memory that its span claims (the heap's invariants check it),
	// which arena.Zero would check again under the arena's lock, on every Zalloc of a reused
	// block: the provider's Zeroer clears it directly.
	if err := h.z.Zero(p, n); err != nil {
		if errors.Is(err, arena.ErrNotStarted) { // nothing written, nothing left to write
			_ = h.Free(p)
		} else {
			h.setAside(p, n)
		}
		return 0, err
	}
	return p, nil
}

// AllocAligned is Alloc for a block whose address is a multiple of alignment, any power of two
// (beyond the chunk size too). The block can be freed like any other: its address is its start.
// It fails as Alloc does, with ErrInvalidAlign for an alignment that is not a power of two and
// ErrTooLarge for one beyond the arena's capacity, or for more bytes than the arena's External
// region holds at that alignment (its base need not be aligned: arena.Arena.MaxSpan).
func (h *Heap) AllocAligned(n, alignment uintptr) (uintptr, error) {
	p, _, err := h.alloc(n, alignment)
	return p, err
}

// alloc is the general path: any size, any alignment; fresh reports a block that reads as zero.
func (h *Heap) alloc(n, alignment uintptr) (p uintptr, fresh bool, err error) {
	if !align.IsPow2(alignment) {
		return 0, false, fmt.Errorf("%w: %d", ErrInvalidAlign, alignment)
	}
	if alignment <= h.align && n-1 < maxClassSize {
		return h.allocClass(n, h.class(n))
	}
	if alignment > h.align && n-1 < maxClassSize && alignment <= min(sliceSize, h.g.chunkAlign) {
		// A class whose size is a multiple of the alignment: pages start on slice
		// boundaries, so every block in them is aligned.
		rn, _ := align.Up(n, alignment)
		for c := int(h.class(rn)); c < len(h.classes); c++ {
			if h.classes[c].size%alignment == 0 {
				return h.allocClass(n, uint8(c))
			}
		}
	}
	return h.allocBig(n, max(alignment, h.align))
}

// allocClass allocates from class c, taking the fast path when it can.
func (h *Heap) allocClass(n uintptr, c uint8) (uintptr, bool, error) {
	pg := h.cur[c]
	fresh := pg.nfree == 0 && pg.fresh // a block from the bump index
	if idx, ok := pg.pop(); ok {
		return h.take(pg, idx, n), fresh, nil
	}
	return h.allocSlow(n, c)
}

// allocSlow finds class c a page with a free block: the current page's remote frees, the next
// available page, every pending remote free, and last a new page.
func (h *Heap) allocSlow(n uintptr, c uint8) (uintptr, bool, error) {
	if h.closed {
		return 0, false, ErrClosed
	}
	cl := &h.classes[c]
	if cl.kind == segObject { // a large class where memory is coarse: an object page (pack.go)
		return h.allocObjectClass(n)
	}
	for attempt := 0; ; attempt++ {
		// Walk the class's available pages, collecting remote frees, dropping full ones.
		for pg := cl.avail.Front(); pg != nil; {
			next := pg.avail.Next()
			if pg.pending.Load() != 0 {
				h.collectPage(pg, false)
			}
			if pg.nfree == 0 && pg.bump == pg.limit && (pg.npurged > 0 || pg.limit < pg.nblocks) && (h.noBlock || h.grow(pg) != nil) {
				pg = next // it stays available; another page may have a block (a new one fails alike)
				continue
			}
			if pg.nfree > 0 || pg.bump < pg.limit {
				h.setCur(c, pg)
				if pg == cl.spare {
					cl.spare = nil // in use again
				}
				return h.allocClass(n, c)
			}
			cl.avail.Remove(&pg.avail)
			h.watch(pg)
			pg = next
		}
		h.setCur(c, &cl.empty)
		if attempt > 0 {
			break
		}
		// Remote frees may have refilled full pages of this class.
		if !h.collectPending() {
			break
		}
	}
	if h.noBlock {
		return 0, false, errWouldBlock
	}
	pg, err := h.newClassPage(c)
	if err != nil {
		return 0, false, err
	}
	h.setCur(c, pg)
	return h.allocClass(n, c)
}

// newClassPage carves a page for class c from a segment with room, or a new segment.
func (h *Heap) newClassPage(c uint8) (*page, error) {
	cl := &h.classes[c]
	kind := cl.kind
	k := int(cl.slices)
	if h.packed && kind == segMedium {
		k = min(k, 2<<min(int(cl.made), len(cl.all), 2)) // pages grow with the class: pack.go
		cl.made = min(cl.made+1, 2)
	}
	pg := h.borrowPage(kind, k, c)
	if pg == nil {
		s, first, err := h.segmentWithRoom(kind, k, k)
		if err != nil {
			return nil, err
		}
		pg = newPage(h, s, first, k, cl.size, int16(c))
		if err := h.extend(pg); err != nil {
			h.freeSlices(pg)
			return nil, err
		}
		h.afterCarve(s)
	}
	pg.allIdx = int32(len(cl.all))
	cl.all = append(cl.all, pg)
	cl.avail.PushFront(pg, &pg.avail)
	h.watch(pg)
	return pg, nil
}

// grow gives a class page with no free block at hand one: its purged blocks' memory committed
// again (revive) or, when it has none, the next part of the page (extend).
func (h *Heap) grow(pg *page) error {
	if pg.npurged > 0 {
		return h.revive(pg)
	}
	return h.extend(pg)
}

// extend commits the next part of a class page: to the end of the slice it reached at least,
// and enough slices for the block at the bump index. A page's memory is committed as its bump
// index reaches it, so a page of large blocks holding a few of them commits those, not its
// 2 MiB (mimalloc extends its pages the same way). Blocks handed out from the bump index stay
// fresh (zero) only while every part committed so far read as zero.
//
// A heap the arena has refused memory (h.tight: the memlock limit) commits only the granules
// the next block needs, where they are smaller than a slice.
func (h *Heap) extend(pg *page) error {
	end := uintptr(pg.bump+1) * pg.bsize // bytes of the page the next block needs
	lo := uintptr(pg.ctop)
	hi := max(lo&^(sliceSize-1)+sliceSize, (end+sliceSize-1)&^(sliceSize-1))
	if g := h.g.granule; h.tight && h.g.fineGranules() && pg.base%g == 0 {
		hi = (end + g - 1) &^ (g - 1)
	}
	hi = min(hi, uintptr(pg.nslice)<<sliceShift)
	fresh, err := h.prepareRange(pg.seg, pg.base-pg.seg.base+lo, hi-lo)
	if err != nil {
		h.refused(err)
		return err
	}
	pg.fresh = pg.fresh && fresh
	pg.ctop = uint32(hi)
	pg.limit = min(uint32(hi/pg.bsize), pg.nblocks)
	return nil
}
