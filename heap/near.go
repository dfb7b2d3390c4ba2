// The owner's page cache: its own class pages by address, one load away.
//
// Finding a block's page through the group's tables (group.go) is a chain of dependent loads:
// the heap's group, the directory, a leaf, the slot's segment, the segment's page slot, then
// the page. On the owner's free that chain was a third of a pair. So the owner keeps near, a
// direct-mapped table of nearLen entries indexed by the address's slice number modulo nearLen
// (128 MiB of address space before two slices collide), filled when a free of one of its own
// class pages had to ask the tables (remember), and cleared for a page when the page is given
// back. An entry holds the page and its geometry (nearEntry), so a hit is one load from the
// address to the block's offset and index, while the page's own fields load beside. The entry
// is checked to cover the address (p - base < span), so a collision or an empty entry (whose
// span is empty) just asks the tables. Slices need not be aligned to their number (an external
// region's chunks may start anywhere): a page whose slices straddle numbers has an entry under
// each, and the range check keeps a neighbour's entry from answering for it.
//
// Only the owner reads or writes near, with plain memory operations, and only pages of its own
// live in it: a page is never reused once given back (see the package invariants), and
// freeSlices clears its entries as it gives it back, so an entry never names a dead page.
// Object pages and huge objects are not cached: their frees take the tables as before.

package heap

// nearLen is the number of entries of the owner's page cache (a power of two): 128 MiB of
// address space, the pages of a million live 64 B blocks, for 128 KiB of the heap's own Go
// memory. With 256 (8 MiB) a churn over 10^6 live blocks missed the cache on most frees, and
// the tables' chain of cache misses cost more than the rest of the pair (issue 29).
const nearLen = 4096

// nearEntry is a class page in the owner's cache with the geometry a free needs, so that the
// block's offset and index follow from the entry alone while the page's own fields load. The
// zero entry is empty: no address is within its span.
type nearEntry struct {
	base   uintptr // the page's first block
	span   uint32  // bytes its blocks cover (page.span: at most a segment)
	bsize  uint32
	divMul uint32
	pg     *page
}

// nearBlock finds the block that starts at p in near: its page and its index; ok false when
// near does not have it (the free paths then ask the tables, and whyNot says why when they do
// not either).
func (h *Heap) nearBlock(p uintptr) (pg *page, idx uint32, ok bool) {
	e := &h.near[p>>sliceShift&(nearLen-1)]
	o := p - e.base
	idx = uint32(uint64(o) * uint64(e.divMul) >> 32)
	return e.pg, idx, o < uintptr(e.span) && idx*e.bsize == uint32(o)
}

// remember puts pg, a class page of the heap's that holds p, into near: the owner's free
// paths call it when they had to ask the tables (Group.find). A dead page is not cached: the
// tables still name a borrowed page given back until its lender takes it back (lend.go), and
// a stale free of one of its blocks must not put it back in near, which freeSlices cleared.
func (h *Heap) remember(p uintptr, pg *page) {
	if pg.dead {
		return
	}
	h.near[p>>sliceShift&(nearLen-1)] = nearEntry{base: pg.base, span: uint32(pg.span), bsize: uint32(pg.bsize), divMul: pg.divMul, pg: pg}
}

// forget clears the entries of near that name pg, a page being given back.
func (h *Heap) forget(pg *page) {
	for s := pg.base >> sliceShift; s <= (pg.base+pg.span-1)>>sliceShift; s++ {
		if e := &h.near[s&(nearLen-1)]; e.pg == pg {
			*e = nearEntry{}
		}
	}
}
