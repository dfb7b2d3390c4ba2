package device

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
)

// verify checks the heap's own bookkeeping against its stream heaps (h.mu held, heap open):
// the deferred set is the lists'
// contents, each a live block of a stream heap; the allocations less the frees done are the
// blocks the stream heaps hold live (a deferred free counts until it is done); each held block
// (Hold) is live, with holds, and has no deferred free; under a quota,
// the bytes counted are the bytes the stream heaps hold live. The stream heaps check their
// own invariants as Stats collects them (heap.checkInvariants). It costs a walk of the
// deferred set, so the heap calls it only when internal/invariants says a check is due
// (checkInvariants); tests call it through Verify.
func (h *Heap) verify() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(h.done) != 0 {
		bad("%d deferred frees handed back and not done", len(h.done))
	}
	queued := 0
	if err := h.lists.Verify(func(s uintptr, marked, open []cuda.DevicePtr) {
		for _, vs := range [2][]cuda.DevicePtr{marked, open} {
			for _, p := range vs {
				queued++
				if !h.deferred[p] {
					bad("block %#x waits on stream %#x and is not marked deferred", p, s)
				}
			}
		}
	}); err != nil {
		bad("deferred frees: %v", err)
	}
	for _, ps := range h.parked {
		if ps.list != nil {
			if h.lists.Lookup(uintptr(ps.s)) == ps.list {
				bad("the parked list of stream %#x is still in the lists", ps.s)
			}
			ps.list.Items(func(marked, open []cuda.DevicePtr) {
				for _, vs := range [2][]cuda.DevicePtr{marked, open} {
					for _, p := range vs {
						queued++
						if !h.deferred[p] {
							bad("block %#x waits on parked stream %#x and is not marked deferred", p, ps.s)
						}
					}
				}
			})
		}
		if ps.sh != nil && h.streams[ps.s] == ps.sh {
			bad("the parked heap of stream %#x is still the stream's", ps.s)
		}
	}
	if queued != len(h.deferred) {
		bad("%d deferred frees queued, %d blocks marked deferred", queued, len(h.deferred))
	}
	for p := range h.deferred {
		if _, err := h.g.Size(uintptr(p)); err != nil {
			bad("deferred block %#x is not live: %v", p, err)
		}
	}
	for p, u := range h.held {
		if _, err := h.g.Size(uintptr(p)); err != nil {
			bad("held block %#x is not live: %v", p, err)
		}
		if h.deferred[p] {
			bad("held block %#x has a deferred free", p)
		}
		if len(u.ids) == 0 {
			bad("held block %#x has no hold", p)
		}
	}
	live, bytes, _ := h.live()
	if h.st.Allocs-h.st.Frees != live {
		bad("%d allocations and %d frees, but the stream heaps hold %d blocks", h.st.Allocs, h.st.Frees, live)
	}
	if h.quota > 0 && uint64(h.used) != bytes {
		bad("the quota counts %d bytes in use, the stream heaps %d", h.used, bytes)
	}
	return errors.Join(errs...)
}

// unlock checks the heap's bookkeeping (checkInvariants, in builds with invariants.Enabled
// only: in others the check is compiled out) and lets go of h.mu. The methods that change the
// heap defer it in place of h.mu.Unlock: one deferred call, where a second defer pushed
// FreeAsync off the open-coded defers.
func (h *Heap) unlock(where string) {
	if invariants.Enabled {
		h.checkInvariants(where)
	}
	h.mu.Unlock()
}

// checkInvariants panics when verify finds the bookkeeping broken, when internal/invariants
// says a check is due (every call with the tag invariants; one in invariants.RaceEvery under
// -race alone). h.mu is held.
func (h *Heap) checkInvariants(where string) {
	if h.closed || !invariants.Due(&h.checks) {
		return
	}
	if err := h.verify(); err != nil {
		panic(fmt.Sprintf("device: invariant broken after %s: %v", where, err))
	}
}
