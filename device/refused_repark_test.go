package device

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeRefusedReusedHandleParksOnce and TestFakeRefusedReusedHandlePurgeParksOnce: the heap
// that finds A's handle refused while a capture puts off the synchronize of the context parks
// A's heap once. The new stream b, which the driver gave A's handle, then allocates from a heap
// of its own: a later poll of the deferred frees (each Alloc's) or purge tick that meets the
// same refusal, still unanswered, must not park b's heap too, leaving b a fresh heap (and a
// fresh segment of the arena) per Alloc until the capture ends: the heap ran out of memory
// after a few 4 KiB Allocs.
func TestFakeRefusedReusedHandleParksOnce(t *testing.T) { parksOnce(t, byPoll) }

func TestFakeRefusedReusedHandlePurgeParksOnce(t *testing.T) { parksOnce(t, byPurge) }

// parksOnce is a refusedReuse found by find, where b allocates 8 small blocks (with a purge
// tick after each when the purge found A): they must share one heap, and A's stay the one
// heap parked.
func parksOnce(t *testing.T, find refusedFinder) {
	r := refusedHandleReused(t, find)
	if r == nil {
		return
	}
	const n = 8
	ps := make([]cuda.DevicePtr, 0, n)
	for range n {
		ps = append(ps, alloc(t, r.h, 4096, r.b))
		if find == byPurge {
			r.h.purgeTick()
		}
	}
	r.h.mu.Lock()
	parked := r.h.parkedHeaps()
	owners := map[any]bool{}
	for _, p := range ps {
		o, err := r.h.g.Owner(uintptr(p))
		must(t, "Owner", err)
		owners[o] = true
	}
	r.h.mu.Unlock()
	if parked != 1 || len(owners) != 1 {
		t.Errorf("after %d Allocs of 4 KiB on b during the capture: %d heaps parked, b's blocks in %d heaps; want A's heap parked alone, b's blocks in one heap",
			n, parked, len(owners))
	}
	freeAll(t, r.h, ps)
	r.keptByA(t, "b's Allocs")
	r.check(t, "b's Allocs", nil)
}
