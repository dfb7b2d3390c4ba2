// Held blocks: a front whose blocks something outside the heap may still use after the user has
// freed them (a CUDA stream with a copy queued from a pinned buffer) holds them. A held block
// stays live; every free refuses it, the non-blocking ones (TryFree) without building anything
// and the others with ErrHeld, so its memory is never handed out again until the holder, having
// seen the outside use end, takes it back with FreeHeld.
//
// The hold is a bit of the block's state word (see freedRemote), set and cleared with the same
// compare-and-swap as a free, so a hold and a free racing on one block are ordered: the free
// wins (the hold then finds no live block) or the hold wins (the free then finds it held).
// Hold shares the block's page first, so an owner's plain free on an exclusive page is ordered
// with it the same way (exclusive.go).
// Nothing on the paths of blocks never held changes: a free compares the state word with the
// one it expects, and a held block's is not that one.

package heap

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// Hold holds the live block that holds address p (p may point inside it) and returns its start
// and the size it was allocated with. first reports whether this call set the hold (false: the
// block was held already). Any goroutine may call it. Errors: ErrNotOwned for an address
// outside the arena's blocks, ErrDoubleFree for one in a free block.
func (g *Group) Hold(p uintptr) (base, size uintptr, first bool, err error) {
	if invariants.Enabled {
		g.foreignBegun.Add(1) // see checkInvariants
		defer g.foreignEnded.Add(1)
	}
	pg, idx, base, err := g.blockAt(p)
	if err != nil {
		return 0, 0, false, err
	}
	pg.enterHold() // before the state word is read: see exclusive.go
	defer pg.leave(true)
	if size = pg.liveSize(idx); size == 0 {
		return 0, 0, false, freeBlockError(p)
	}
	if err := outsideError(p, base, size); err != nil {
		return 0, 0, false, err
	}
	old, ok := pg.hold(idx, 0)
	if !ok {
		return 0, 0, false, freeBlockError(p) // freed meanwhile
	}
	return base, size, old&held == 0, nil
}

// HoldSized holds the block that starts at p, allocated with n bytes, with the checks of
// FreeSized, and reports whether this call set the hold.
func (g *Group) HoldSized(p, n uintptr) (first bool, err error) {
	if invariants.Enabled {
		g.foreignBegun.Add(1) // see checkInvariants
		defer g.foreignEnded.Add(1)
	}
	pg, idx, ok := g.find(p)
	if !ok {
		return false, g.whyNot(p)
	}
	want := stateOf(n)
	if n == 0 || want == stateMax && pg.objSize.Load() != n {
		return false, fmt.Errorf("%w: %#x held with %d bytes", ErrSizeMismatch, p, n)
	}
	pg.enterHold()
	old, ok := pg.hold(idx, want)
	pg.leave(true)
	if !ok {
		return false, pg.freeError(idx, old, p, n, old&held)
	}
	return old&held == 0, nil
}

// Held reports whether the block that starts at p is live and held.
func (g *Group) Held(p uintptr) bool {
	pg, idx, ok := g.find(p)
	return ok && atomic.LoadUint32(&pg.state[idx])&(freedRemote|held) == held
}

// hold sets the hold of live block idx, allocated with want bytes (0: any size), and returns its
// state word before; ok is false, and nothing changed, when the block is not live or not of
// that size.
func (pg *page) hold(idx, want uint32) (old uint32, ok bool) {
	if invariants.Enabled {
		pg.holdSeen.mark() // its callers set keepShared first: see reexclusive
	}
	w := &pg.state[idx]
	for {
		old = atomic.LoadUint32(w)
		if old == 0 || old&freedRemote != 0 || want != 0 && old&^held != want {
			return old, false
		}
		if old&held != 0 || atomic.CompareAndSwapUint32(w, old, old|held) {
			return old, true
		}
	}
}

// FreeHeld frees the held block at p, allocated with n bytes, from any goroutine, the way
// FreeSized does. It refuses a block that is not held (ErrInvalidArgument): the other frees
// take those.
func (g *Group) FreeHeld(p, n uintptr) error { return g.freeSized(p, n, held) }

// FreeHeld is Group.FreeHeld by the heap's owner: a block of its own goes straight back, as
// with FreeSized.
func (h *Heap) FreeHeld(p, n uintptr) error { return h.freeSlow(p, n, freeSized, held) }

// A BlockRef is a live block found by FindFrom: its tag, and a hold of that block.
type BlockRef struct {
	pg   *page
	idx  uint32
	want uint32 // its state word, less the hold: a hold refuses a block freed and handed out since
}

// FindFrom finds the live block that starts at p, for the range [p, p+n) (n > 0) in it, in one
// lookup, and holds nothing: a caller that knows the block's start has no need of Block first,
// and one that must write the block's tag before it holds the block (Tag, then Hold) looks it
// up once. ok is false, and nothing has changed, when p is not the start of a live block or the
// range runs past the size it was allocated with: call Block and Hold, which say why. Any
// goroutine may call it.
func (g *Group) FindFrom(p, n uintptr) (r BlockRef, ok bool) {
	if invariants.Enabled {
		g.foreignBegun.Add(1) // see checkInvariants
		defer g.foreignEnded.Add(1)
	}
	pg, idx, found := g.find(p)
	if !found || n == 0 {
		return BlockRef{}, false
	}
	pg.enterHold() // before the state word is read: see exclusive.go
	defer pg.leave(true)
	return pg.ref(idx, n)
}

// ref returns a BlockRef to block idx of pg, if it is live and was allocated with at least n
// bytes (FindFrom, TryFindFrom).
func (pg *page) ref(idx uint32, n uintptr) (BlockRef, bool) {
	st := atomic.LoadUint32(&pg.state[idx])
	size := uintptr(st &^ held)
	if pg.class < 0 {
		size = pg.objSize.Load()
	}
	if st == 0 || st&freedRemote != 0 || n > size {
		return BlockRef{}, false
	}
	return BlockRef{pg: pg, idx: idx, want: st &^ held}, true
}

// Hold holds the block r names, as Group.Hold does, and reports whether this call set the
// hold; ok is false, and nothing has changed, when the block has been freed since FindFrom
// (and handed out again, perhaps). Any goroutine may call it.
func (r BlockRef) Hold() (first, ok bool) {
	old, ok := r.pg.hold(r.idx, r.want)
	if !ok {
		return false, false
	}
	return old&held == 0, true
}

// TryHoldSized is HoldSized by the heap's owner, for a block of one of its own class pages:
// found in its page cache with no lookup in the group's tables (or in them, and then
// cached), and held on an exclusive page with a plain store that keeps it exclusive. ok is
// false, and nothing has changed, where it does not serve (a page of another heap, an object
// page, a sharer under way) or HoldSized would refuse: call HoldSized, which says why. It is
// non-blocking.
func (h *Heap) TryHoldSized(p, n uintptr) (first, ok bool) {
	want := stateOf(n)
	if n == 0 || want == stateMax {
		return false, false
	}
	pg, idx, found := h.nearBlock(p)
	if !found {
		if pg, idx, found = h.ownBlockSlow(p); !found {
			return false, false
		}
	}
	return h.ownerHold(pg, idx, want)
}

// ownBlockSlow finds the block at p, missed by the owner's page cache, in the group's tables,
// and puts its page in the cache (as tryFree does); found is false for another heap's page, an
// object page or a dead one (a borrowed page given back, still in its lender's tables).
func (h *Heap) ownBlockSlow(p uintptr) (pg *page, idx uint32, found bool) {
	if pg, idx, found = h.g.find(p); !found || pg.class < 0 || pg.heap != h || pg.dead {
		return nil, 0, false
	}
	h.remember(p, pg)
	return pg, idx, true
}

// ownerHold is the owner's hold of live block idx of its class page pg, allocated with want
// bytes: a plain store while pg is exclusive (holdExcl), else the compare-and-swap, with pg
// kept shared from then on (keepShared: a page holding a block another goroutine may free does
// not become exclusive again). ok is false, and nothing has changed, where the hold is refused
// or a sharer is at work on pg.
func (h *Heap) ownerHold(pg *page, idx, want uint32) (first, ok bool) {
	if old, ok, excl := h.holdExcl(pg, idx, want); excl {
		return old&held == 0, ok
	}
	if atomic.LoadUint32(&pg.mode) != shared {
		return false, false // a sharer is at work: the blocking hold waits for it
	}
	if !pg.keepShared.Load() {
		pg.keepShared.Store(true) // the owner's: no reexclusive can be under way
	}
	old, ok := pg.hold(idx, want)
	if !ok {
		return false, false
	}
	return old&held == 0, true
}

// TryFindFrom is FindFrom by the heap's owner, for a block of one of its own class pages: found
// in its page cache with no lookup in the group's tables (or in them, and then
// cached, as TryHoldSized does), and with no sharing of the page, which the owner then holds
// with TryHoldRef (a plain store while the page is exclusive). ok is false, and nothing has
// changed, where FindFrom's is or where it does not serve (another heap's page, an object
// page): call FindFrom. It is non-blocking.
func (h *Heap) TryFindFrom(p, n uintptr) (r BlockRef, ok bool) {
	pg, idx, found := h.nearBlock(p)
	if !found {
		pg, idx, found = h.ownBlockSlow(p)
	}
	if n == 0 || !found {
		return BlockRef{}, false
	}
	return pg.ref(idx, n)
}

// TryHoldRef is Hold by the heap's owner of block r, found by TryFindFrom, as TryHoldSized
// holds: a plain store while the page is exclusive, else the compare-and-swap. ok
// is false, and nothing has changed, where r.Hold's would be or where a sharer is at work on
// the page: call r.Hold after FindFrom. It is non-blocking.
func (h *Heap) TryHoldRef(r BlockRef) (first, ok bool) {
	return h.ownerHold(r.pg, r.idx, r.want)
}

// TryFreeOrHeld is TryFree that also reports, when it refuses, whether it found the block live,
// allocated with n bytes and held (a caller then defers its free rather than asking Held and
// Size). held false says nothing: the block may be held still (call Held).
func (h *Heap) TryFreeOrHeld(p, n uintptr) (freed, held bool) {
	err := h.freeAt(p, n, freeTry)
	return err == nil, err == errHeldBlock
}

// errHeldBlock is how TryFree's paths refuse a live block of the size asked that is held: no
// error is built on a non-blocking path.
var errHeldBlock = errors.New("heap: held")

// heldSized reports whether state word old, refused by a free of n bytes, is that of a live
// block allocated with n bytes and held.
func heldSized(old uint32, n uintptr) bool {
	return old&(freedRemote|held) == held && old&^held == stateOf(n) && stateOf(n) != stateMax
}
