// The non-blocking entry points. TryAlloc and TryFree do what Alloc and FreeSized do whenever
// that needs nothing but what the heap already holds, and refuse, having changed nothing,
// when it needs more. They make no arena call, take no lock, make no system call and allocate
// no Go memory, so a caller may run them where it must not block: a front that owns a heap by
// running pinned to a processor (package pinned) takes them first and falls back to Alloc and
// FreeSized where it may block.
//
// What a non-blocking path cannot do it leaves for the next blocking one:
//   - a class page that empties stays on its class's available list (h.deferred is set) rather
//     than going back to its segment, which may hand a segment to the arena; the heap's next
//     search for room (segmentWithRoom), Collect, Trim or Close gives it back;
//   - a remotely freed object page or huge object, whose free calls the arena, stays on the
//     pending stack for the next blocking collection (allocBig collects before it looks for a
//     kept page; so do Collect, Trim and Close).

package heap

import (
	"errors"
	"sync/atomic"

	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// TryAlloc is Alloc restricted to what the heap holds: a block of a size class from the
// class's pages, with the frees other goroutines made collected, or a kept object page left
// committed. ok is false, and nothing has changed, when the request needs the arena (a new or
// a longer page, a new or purged object page, a huge object) or is not one Alloc serves
// (zero bytes, a closed heap): call Alloc. The owner calls it.
func (h *Heap) TryAlloc(n uintptr) (p uintptr, ok bool) {
	if n-1 >= maxClassSize {
		return h.tryReuseObject(n)
	}
	var pg *page
	if n <= directMax {
		pg = h.direct[(n+15)>>4] // see Alloc
	} else {
		pg = h.cur[h.class(n)]
	}
	if idx, ok := pg.pop(); ok {
		return h.take(pg, idx, n), true
	}
	h.noBlock = true
	p, _, err := h.allocSlow(n, h.class(n))
	h.noBlock = false
	return p, err == nil
}

// errWouldBlock is how the slow paths refuse, under noBlock, what needs the arena.
var errWouldBlock = errors.New("heap: would block")

// TryFree is FreeSized restricted to frees that need no arena call: a block of a class page,
// of this heap or (the lock-free remote free) of another heap's page that is shared already
// (sharing an exclusive page waits for its owner's free), and an object page
// or huge object of its own that can be kept as it is (tracked already, room on its keep
// list, the purge timer running). It reports whether it freed the block. It refuses, and
// nothing has changed, for other object pages and huge objects, its own or another heap's
// (whose owner frees them at once where a remote free would wait for its next collection),
// and for any free FreeSized would refuse (its error is built by FreeSized: a non-blocking
// path makes none, as formatting may allocate and lock). The owner calls it.
func (h *Heap) TryFree(p, n uintptr) bool { return h.freeAt(p, n, freeTry) == nil }

// TryFreeHeld is TryFree of a held block (see FreeHeld): what FreeHeld does when it needs no
// arena call, leaving a page it empties for the next blocking path, as TryFree does.
// Its first path is TryFree's: a block of a page in the owner's cache, which is its own
// class page, freed by a plain store while the page is exclusive (the owner's TryHoldSized
// keeps it so).
func (h *Heap) TryFreeHeld(p, n uintptr) bool {
	if pg, idx, ok := h.nearBlock(p); ok && n != 0 {
		size, ok := h.freeOwn(pg, idx, n, held)
		if ok {
			h.tookBack(pg, idx, size)
		}
		return ok // a refusal here is tryFree's too
	}
	return h.tryFree(p, n, held) == nil
}

// tryFreeSlow is TryFree where freeAt's fast path does not serve. It returns errWouldBlock (no
// error is built on a non-blocking path) when it refuses.
func (h *Heap) tryFreeSlow(p, n uintptr) error { return h.tryFree(p, n, 0) }

// tryFree is tryFreeSlow of a block held or not, as hold says (see freeState).
func (h *Heap) tryFree(p, n uintptr, hold uint32) error {
	pg, idx, ok := h.g.find(p)
	if !ok || n == 0 {
		return errWouldBlock
	}
	if pg.class >= 0 && pg.heap == h {
		h.remember(p, pg)
	}
	if pg.class < 0 {
		if pg.heap == h && h.tryFreeObject(pg, n, hold) {
			return nil
		}
		return errWouldBlock
	}
	if pg.heap != h {
		if invariants.Enabled {
			h.g.foreignBegun.Add(1) // a remote free, as freeRemote's: see checkInvariants
			defer h.g.foreignEnded.Add(1)
		}
		// An exclusive page is shared first, which waits (exclusive.go): FreeSized does it.
		counted := !pg.keepShared.Load()
		if counted {
			pg.sharers.Add(1) // enter's count, without the sharing
		}
		if atomic.LoadUint32(&pg.mode) != shared {
			pg.leave(counted)
			return errWouldBlock
		}
		old, ok := pg.freeState(idx, true, n, hold)
		if ok {
			pg.remoteFreed(idx)
		}
		pg.leave(counted)
		switch {
		case ok:
			return nil
		case hold == 0 && heldSized(old, n):
			return errHeldBlock
		}
		return errWouldBlock
	}
	size, ok := h.freeOwn(pg, idx, n, hold)
	if !ok {
		if hold == 0 && heldSized(size, n) {
			return errHeldBlock
		}
		return errWouldBlock
	}
	h.tookBack(pg, idx, size)
	return nil
}

// tookBack is freed's class-page half, with the page change non-blocking: block idx of pg, its
// own class page, no longer live (it was size bytes), goes back on the page.
func (h *Heap) tookBack(pg *page, idx, size uint32) {
	h.pushFree(pg, idx, size)
	if pg.nfree >= pg.alert { // see watch
		h.noBlock = true
		h.pageChanged(pg, true)
		h.noBlock = false
	}
}

// releaseDeferred gives back the empty class pages that non-blocking paths left on the
// available lists.
func (h *Heap) releaseDeferred() {
	if !h.deferred {
		return
	}
	h.deferred = false
	for c := range h.classes {
		cl := &h.classes[c]
		for pg := cl.avail.Front(); pg != nil; {
			next := pg.avail.Next()
			if pg.empty() && h.cur[c] != pg && pg != cl.spare {
				h.release(pg)
			}
			pg = next
		}
	}
}

// tryReuseObject is allocBig's reuse of a kept object page or huge object for TryAlloc: only
// one whose memory is as it was left (committed, and claimed back from the arena before its
// purge), with no tail to give to the purge.
func (h *Heap) tryReuseObject(n uintptr) (uintptr, bool) {
	if n > h.objMax {
		for i, pg := range h.bigFree {
			if n > pg.bsize || n < pg.bsize/2 {
				continue
			}
			if !pg.tracked || n > pg.want || h.tailToPurge(pg, n) {
				return 0, false
			}
			if !pg.kept.Claim() {
				pg.want = 0 // given up meanwhile: allocBig commits it again
				return 0, false
			}
			h.bigFree = append(h.bigFree[:i], h.bigFree[i+1:]...)
			return h.takeObject(pg, n), true
		}
		return 0, false
	}
	k := int((n + sliceSize - 1) >> sliceShift)
	for i, pg := range h.objFree {
		if int(pg.nslice) < k || int(pg.nslice) > k+k/8 {
			continue
		}
		if !pg.tracked || !pg.knownCommitted() {
			return 0, false
		}
		if !pg.kept.Claim() {
			// Given up meanwhile: now busy, with memory to commit again, which allocBig
			// does when it finds the page so marked.
			pg.unknownCommitted()
			return 0, false
		}
		h.objFree = append(h.objFree[:i], h.objFree[i+1:]...)
		return h.takeObject(pg, n), true
	}
	return 0, false
}

// tryFreeObject is the owner's free of an object page or huge object for TryFree: freeObject
// when keeping it needs no arena call.
func (h *Heap) tryFreeObject(pg *page, n uintptr, hold uint32) bool {
	list, limit := &h.objFree, h.objKeep
	if pg.seg.kind == segHuge {
		list, limit = &h.bigFree, maxBigFree
	}
	if h.hold && pg.seg.kind == segHuge || !pg.tracked || len(*list) == limit || h.kc.Waits() {
		return false
	}
	if _, ok := pg.freeState(0, false, n, hold); !ok {
		return false
	}
	h.live -= pg.objSize.Load()
	h.frees++
	if h.kc.Idle(&pg.kept) {
		h.kt.Start(false)
	}
	*list = append(*list, pg) // within its capacity: no allocation
	return true
}
