// Block tags: a word beside each held block for its holder.
//
// A holder (pinned's stream order) keeps what it knows of a held block beside the block: the
// streams that use it. The heap gives the word and never reads it. A page makes its tags when
// the first is asked for (BlockRef.Tag), one word per block, so pages never tagged cost a nil
// pointer. A tag reads zero until its holder writes it; the holder leaves it zero when it
// gives the block back (FreeHeld), so that the block's next life starts at zero.

package heap

import "sync/atomic"

// tag returns the tag of block idx of pg, making the page's tags when it has none.
func (pg *page) tag(idx uint32) *atomic.Uintptr {
	t := pg.tags.Load()
	if t == nil {
		made := make([]atomic.Uintptr, pg.nblocks)
		if pg.tags.CompareAndSwap(nil, &made) {
			t = &made
		} else {
			t = pg.tags.Load()
		}
	}
	return &(*t)[idx]
}

// Tag returns the tag of block r, making its page's tags when it has none.
func (r BlockRef) Tag() *atomic.Uintptr { return r.pg.tag(r.idx) }

// TryTag returns the tag of block r when its page's tags are made, else nil (Tag makes them):
// for a non-blocking path, which allocates nothing.
func (r BlockRef) TryTag() *atomic.Uintptr {
	if t := r.pg.tags.Load(); t != nil {
		return &(*t)[r.idx]
	}
	return nil
}

// NearTag is Group.Tag by the heap's owner for a block of a page in its page cache,
// with no lookup in the group's tables; nil where it does not serve or the page has no tags
// (call Group.Tag, which tells the two apart).
func (h *Heap) NearTag(p uintptr) *atomic.Uintptr {
	pg, idx, ok := h.nearBlock(p)
	if !ok {
		return nil
	}
	if t := pg.tags.Load(); t != nil {
		return &(*t)[idx]
	}
	return nil
}

// Tag returns the tag of the block that starts at p, or nil when p starts no block or no tag
// of its page was ever asked for. Any goroutine may call it; it takes no lock and allocates
// nothing.
func (g *Group) Tag(p uintptr) *atomic.Uintptr {
	pg, idx, ok := g.find(p)
	if !ok {
		return nil
	}
	t := pg.tags.Load()
	if t == nil {
		return nil
	}
	return &(*t)[idx]
}
