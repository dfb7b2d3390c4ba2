package device

import (
	"fmt"
	"slices"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// Holds: a block used by work outside the heap's streams that ends after the call that starts
// it (a network transfer of package remote, which UCX may read or write until it completes).
//
// A hold is an entry of h.held, under h.mu, which orders every free of the heap: Free and
// FreeAsync of a held block look it up there (only while some block is held: a heap never held
// pays a branch on len(h.held)) and, rather than freeing it, mark the entry freed, with the
// FreeAsync's stream. The last Release then makes that free as Free or FreeAsync would have made
// it at that moment: a Free's (ZeroOnFree's memset waited for, the block back in its stream heap)
// at once; a FreeAsync's through the stream-ordered machinery (FreeAsync's same-stream rule, else
// the stream's list of deferred frees, internal/streamq), so that the block changes owner only
// once that stream has passed a point placed after the Release, after the FreeAsync. A stream
// forgotten since the FreeAsync (ForgetStream synchronized it: it has passed the FreeAsync) takes
// no list: the free is a Free then (streamq's Lists.GetKnown makes the look and the list one step).
// ForgetStream forgets a stream only once it has waited for it, and waits for it even with no
// state of its own there while a held block's free waits on it. A stream parked since
// (destroyed, its ForgetStream refused during a capture: park.go) is waited for only by a
// synchronize of the context: the free waits for that too, parked (parkFree).
//
// A held block is live in its stream heap, freed or not: nothing else frees it (the deferred
// lists hold only blocks freed with no hold left, Trim and the idle purge give back empty
// segments only), Close and ForgetStream count it live, and a copy into a held block whose free
// waits for its holds is refused as one into a block with a free pending. The heap's own hold bit
// (heap.Group.Hold, which lets a pool's lock-free frees refuse a held block) is not used: every
// free of a device heap takes h.mu and finds the entry.

// Hold keeps the live block at p, or the live block p points inside (an interior pointer holds
// the block it lies in), in use by work outside the heap's streams until Release: a Free or
// FreeAsync of the block meanwhile returns at once, with no error, and takes effect at the last
// Release of its holds (a FreeAsync's in its stream's order, after the Release), so memory that
// such work still reads or writes is never handed out again. A block may be held many times.
// Holding costs the heap's lock, a lookup and a map entry; package remote holds the device
// memory of its transfers.
//
// Errors: one wrapping ErrNotOwned and heap.ErrNotOwned for memory that is not in a block of
// this heap, ErrNotOwned and heap.ErrDoubleFree for a freed block or one whose free is pending
// (deferred on a stream, or waiting for its holds), ErrClosed after Close.
//
// A Hold and a free of the same block must be ordered by their caller, as any use and its free
// are; if they race, the free is deferred, or it wins and the Hold is refused.
func (h *Heap) Hold(p cuda.DevicePtr) (Hold, error) {
	if err := h.lock(); err != nil {
		return Hold{}, err
	}
	defer h.unlock("Hold")
	b, size, err := h.g.Block(uintptr(p))
	if err != nil {
		return Hold{}, fmt.Errorf("%w: hold of %#x: %w", ErrNotOwned, p, err)
	}
	base := cuda.DevicePtr(b)
	if h.deferred[base] {
		return Hold{}, fmt.Errorf("%w: hold of %#x: %w: block %#x has a free pending on its stream", ErrNotOwned, p, heap.ErrDoubleFree, base)
	}
	u, ok := h.held[base]
	if ok && u.freed != 0 {
		return Hold{}, fmt.Errorf("%w: hold of %#x: %w: block %#x was freed; its free waits for its holds", ErrNotOwned, p, heap.ErrDoubleFree, base)
	}
	if h.held == nil {
		h.held = map[cuda.DevicePtr]heldBlock{}
	}
	h.holdID++
	u.ids = append(u.ids, h.holdID)
	h.held[base] = u
	return Hold{h: h, base: base, size: size, id: h.holdID}, nil
}

// Hold is one hold of a device block (Heap.Hold), ended once by Release. The zero Hold holds
// nothing.
type Hold struct {
	h    *Heap
	base cuda.DevicePtr
	size uintptr
	id   uint64 // this hold's, unique in its heap: a hold is ended once, and never another's
}

// Block returns the start of the held block, and Size the size it was allocated with: a holder
// whose work covers a range checks with them that the range lies inside the block.
func (d Hold) Block() cuda.DevicePtr { return d.base }

// Size returns the size the held block was allocated with (see Block).
func (d Hold) Size() int { return int(d.size) }

// Release ends the hold. At the block's last, a Free or FreeAsync made meanwhile takes effect,
// as it would have at this moment (a FreeAsync's once its stream has passed the Release, or,
// for a stream destroyed and parked since (ForgetStream), once the heap has synchronized the
// context, as for the stream's own deferred frees). With Options.ZeroOnFree, when the driver
// refuses the block's memset then (a CUDA graph capture on its stream, a stream destroyed
// without ForgetStream), the free is not lost: it waits, as a parked stream's frees do, for the
// heap's next synchronize of the context (Sync, Trim, ForgetStream, Close, an Alloc out of
// memory, once no capture holds the context), and the block is cleared and freed then; it counts
// in Stats.DeferredFrees meanwhile. Errors: one wrapping heap.ErrDoubleFree for a Release of a
// hold already ended (any of a block's holds: a second Release never ends another's hold),
// ErrNotOwned for the zero Hold, ErrClosed after the heap's Close.
func (d Hold) Release() error {
	h := d.h
	if h == nil {
		return fmt.Errorf("%w: release of the zero Hold", ErrNotOwned)
	}
	if err := h.lock(); err != nil {
		return fmt.Errorf("%w: release of a hold of block %#x", err, d.base)
	}
	defer h.unlock("Release")
	u, ok := h.held[d.base]
	i := slices.Index(u.ids, d.id)
	if !ok || i < 0 {
		return fmt.Errorf("%w: release of a hold of block %#x, which it no longer holds", heap.ErrDoubleFree, d.base)
	}
	if u.ids = slices.Delete(u.ids, i, i+1); len(u.ids) > 0 {
		h.held[d.base] = u
		return nil
	}
	delete(h.held, d.base)
	switch u.freed {
	case heldFreed:
		return h.releasedFree(d.base, nil, nil)
	case heldFreedAsync:
		// A stream parked since (destroyed, and a capture kept ForgetStream from waiting for
		// it): only a synchronize of the context waits for its work, and the free with it.
		if h.parkedWaits(u.stream) {
			h.parkFree(d.base, u.stream, false)
			return nil
		}
		// The stream's list, unless ForgetStream forgot the stream since the FreeAsync: it
		// synchronized the stream then, which has passed the FreeAsync, and the free is a Free.
		if l := h.lists.GetKnown(streamq.Stream(u.stream)); l != nil {
			return h.releasedFree(d.base, &u.stream, l)
		}
		return h.releasedFree(d.base, nil, nil)
	}
	return nil
}

// releasedFree makes the free of p that waited for its holds, on stream *s with its list l, or
// a Free when s is nil. A memset (ZeroOnFree) the driver refuses parks the free (parkFree).
// h.mu is held.
func (h *Heap) releasedFree(p cuda.DevicePtr, s *cuda.Stream, l *deferredList) error {
	owner, err := h.owner(p)
	if err == nil && s == nil {
		if h.scrub(p, nil, parkedLater) != nil {
			h.parkFree(p, 0, true)
			return nil
		}
		err = h.free(owner, p)
	} else if err == nil {
		var size uintptr
		if size, err = h.g.Size(uintptr(p)); err == nil && h.scrub(p, s, parkedLater) != nil {
			h.parkFree(p, *s, true)
			return nil
		}
		switch {
		case err != nil:
		case h.reusableOn(owner, *s, size):
			err = h.free(owner, p)
		default:
			h.deferOn(l, p)
		}
	}
	if err != nil {
		return fmt.Errorf("device: the free of block %#x deferred to its last Release (the block stays allocated): %w", p, err)
	}
	return nil
}

// parkedWaits reports whether a stream parked with handle s (park.go) waits still for a
// synchronize of the context. h.mu is held.
func (h *Heap) parkedWaits(s cuda.Stream) bool { return h.parkedSyncWaits(parkedUnder(s)) }

// parkFree makes the free of held block p, made at its last Release, wait for the next
// synchronize of the context, as a parked stream's own deferred frees do: on a list of its own,
// parked apart from every handle (streamq's Lists.ParkItems), released by settleParked. With
// Options.ZeroOnFree the block is cleared then, on the legacy stream (scrubParked), once the
// work that may still write it has run. Two frees wait so:
//   - a FreeAsync on stream s parked since (parkedWaits): only that synchronize waits for the
//     destroyed stream's work;
//   - refused, a Free (s 0) or FreeAsync on s whose memset the driver refused (a capture on the
//     memset's stream, a stream destroyed without ForgetStream, a fault): neither s's order
//     (the memset is not queued) nor a retry now would do. The entry then names no stream
//     handle parked: s may be a live stream's, or a destroyed one's.
//
// h.mu is held.
func (h *Heap) parkFree(p cuda.DevicePtr, s cuda.Stream, refused bool) {
	l := h.lists.ParkItems(streamq.Stream(s), []cuda.DevicePtr{p})
	h.parked = append(h.parked, parkedStream{s: s, mark: h.points().SyncMark(), list: l, scrub: h.zeroOnFree, refused: refused})
	h.deferred[p] = true
	h.st.DeferredFrees++
}

// deferHeld defers the free of held block p (a FreeAsync on *s, or a Free when s is nil) to its
// last Release, or refuses a second one. h.mu is held.
func (h *Heap) deferHeld(p cuda.DevicePtr, u heldBlock, s *cuda.Stream) error {
	if u.freed != 0 {
		return fmt.Errorf("%w: %#x was freed already; its free waits for its holds", heap.ErrDoubleFree, p)
	}
	u.freed = heldFreed
	if s != nil {
		u.freed, u.stream = heldFreedAsync, *s
	}
	h.held[p] = u
	return nil
}

// freedHeld reports whether block p is held with a free waiting for its holds. h.mu is held.
func (h *Heap) freedHeld(p cuda.DevicePtr) bool {
	if len(h.held) == 0 {
		return false
	}
	u, ok := h.held[p]
	return ok && u.freed != 0
}

// heldFreedOn reports whether a held block's FreeAsync on s waits for its last Release: s must
// not be forgotten before it has passed that FreeAsync (ForgetStream). h.mu is held.
func (h *Heap) heldFreedOn(s cuda.Stream) bool {
	for _, u := range h.held {
		if u.freed == heldFreedAsync && u.stream == s {
			return true
		}
	}
	return false
}

// heldBlock is a held block: its holds, and the free waiting for them, if any.
type heldBlock struct {
	ids    []uint64    // of its holds not yet released (Hold.id)
	freed  uint8       // 0, heldFreed or heldFreedAsync
	stream cuda.Stream // a FreeAsync's
}

const (
	heldFreed      = 1
	heldFreedAsync = 2
)

// heldSay says, for Close's refusal, how many of the live blocks are held and how many of those
// wait for their last Release to be freed; "" when none is held. h.mu is held.
func (h *Heap) heldSay() string {
	if len(h.held) == 0 {
		return ""
	}
	freed := 0
	for _, u := range h.held {
		if u.freed != 0 {
			freed++
		}
	}
	return fmt.Sprintf(", %d of them held (Hold), %d of those freed and waiting for their last Release", len(h.held), freed)
}
