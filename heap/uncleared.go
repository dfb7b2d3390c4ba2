// Blocks set aside by a Zalloc whose clear failed.
//
// A provider's clear of device or managed memory queues a memset on a stream and waits for it;
// when the wait fails the memset may still be queued (arena.Zeroer), and would wipe whatever a
// new owner of the block wrote first. The heap cannot tell when it has run (it knows nothing of
// streams), so it gives the block to no one, the arena included: it stays live, on h.uncleared,
// until the owner, who can (a synchronize of the context that succeeds after the failure),
// calls ReleaseUncleared: held (hold.go), so that no free takes it, a user's stale one
// included. Only Zalloc's failure path, Stats and Close's error look at them. A
// clear that failed before it began (arena.ErrNotStarted) wrote nothing: its block is freed.

package heap

import (
	"fmt"
	"sync/atomic"
)

// unclearedBlock is a block of n bytes asked for at p whose clear failed.
type unclearedBlock struct{ p, n uintptr }

// setAside keeps block p of n bytes, whose clear failed, live and out of everyone's reach: held
// (hold.go), so that every free refuses it, a user's stale free of its address among them (the
// block was theirs before the Zalloc reused it), until ReleaseUncleared takes it back.
func (h *Heap) setAside(p, n uintptr) {
	if _, err := h.g.HoldSized(p, n); err != nil {
		panic(fmt.Sprintf("heap: hold of block %#x (%d bytes) that Zalloc set aside: %v", p, n, err))
	}
	h.uncleared = append(h.uncleared, unclearedBlock{p, n})
}

// ReleaseUncleared frees the blocks that Zallocs set aside when their clear failed
// (Stats.Uncleared), so that they serve again, and returns how many it freed. It is the owner's
// step, made on the owner's goroutine as Alloc is, and only the owner can make it:
//
//   - When: after a Zalloc failed with an error that does not wrap arena.ErrNotStarted
//     (Stats.Uncleared is then above 0), once no clear that failed can still write: for device
//     or managed memory, after a synchronize of the context (cuda.Device.Synchronize,
//     cuCtxSynchronize) that began after the failed Zallocs returned and succeeded. A synchronize
//     that fails proves nothing: keep them set aside until one succeeds. Called earlier, it hands
//     a block to the next Alloc while the failed clear's memset may still wipe it.
//   - If never called: the blocks stay live for good. They count in Stats.Live and InUse, no
//     Alloc reuses them, the segments that hold them stay the heap's (Trim gives back the
//     rest), and Close fails with ErrLiveBlocks, releasing nothing.
//
// The heap does not call it itself, at Trim, Close or an Alloc's slow path: it knows nothing of
// the provider's streams or context, and none of its calls waits for the device, so none is a
// point after which the clear is known to be over; a synchronize of the context made there would
// wait for every stream's work, and end a CUDA graph capture the user has begun on any stream.
func (h *Heap) ReleaseUncleared() int {
	k := len(h.uncleared)
	for _, b := range h.uncleared {
		_ = h.FreeHeld(b.p, b.n) // held since setAside: no other free can reach it
	}
	clear(h.uncleared)
	h.uncleared = h.uncleared[:0]
	return k
}

// verifyUncleared checks that every block set aside is a live block of the heap, of the size
// it was set aside with, held, and set aside once.
func (h *Heap) verifyUncleared() error {
	seen := make(map[uintptr]bool, len(h.uncleared))
	for _, b := range h.uncleared {
		pg, idx, err := h.g.locate(b.p)
		switch {
		case err != nil:
			return fmt.Errorf("block %#x set aside by a failed clear: %w", b.p, err)
		case pg.heap != h || pg.liveSize(idx) != b.n || atomic.LoadUint32(&pg.state[idx])&held == 0:
			return fmt.Errorf("block %#x set aside by a failed clear is not a live block of %d bytes"+
				" of the heap, or is not held", b.p, b.n)
		case seen[b.p]:
			return fmt.Errorf("block %#x set aside by a failed clear twice", b.p)
		}
		seen[b.p] = true
	}
	return nil
}
