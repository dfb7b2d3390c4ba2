package device

import (
	"errors"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
)

// TestFakeFailedForgetKeepsIdlePurge: a ForgetStream refused for the live blocks of its stream's
// heap has synchronized the stream and taken the idle purge's requests for that heap off their
// list: it does them there (the stream has passed them), and a request that the heap's work
// since has made stale is asked again by the ticks after it, so the heap still goes down to
// what its live blocks need. Quiet: the heap is trimmed at the ForgetStream; busy (an
// allocation and a free on the stream after the request): a later quiet tick asks again. It
// passes as the code is (a guard): a ForgetStream that dropped the requests instead (tried by
// hand) leaves the quiet heap asked for by a request no list holds, and its memory never goes.
func TestFakeFailedForgetKeepsIdlePurge(t *testing.T) {
	for _, busy := range []bool{false, true} {
		f, dev, h := purgeHeap(t, false, true)
		if f == nil {
			return
		}
		s := newStream(t, dev, h)
		live, peak := burstIdle(t, f, h, s, 2)
		min := floor(h, live)
		h.purgeTick() // busy since the last look
		h.purgeTick() // quiet: asked for, a point recorded on s, which the fake holds
		if busy {
			p := alloc(t, h, 64, s)
			must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
		}
		if err := h.ForgetStream(pcuda.Stream(s)); !errors.Is(err, heap.ErrLiveBlocks) {
			t.Fatalf("busy %v: ForgetStream with live blocks: %v, want heap.ErrLiveBlocks", busy, err)
		}
		f.Hold(false)
		for range 4 {
			h.purgeTick()
		}
		if !waitFor(func() bool { return h.Usage().Committed <= min }) {
			t.Errorf("busy %v: after a refused ForgetStream and 4 ticks: %d bytes committed (%d at the"+
				" peak), want %d (the granules the live blocks touch)", busy, h.Usage().Committed, peak, min)
		}
		f.Complete()
		freeAll(t, h, live)
	}
}
