package device

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeCloseParkedClearRefused: Close settles the parked entries once. When its clear of a
// held block's parked free is refused (FailAfter), the free stays parked, and Close returns
// that refusal and releases nothing; the next Close clears the block, frees it and closes the
// heap. The refusal Close returned was never stale: the entry was still parked.
func TestFakeCloseParkedClearRefused(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	parkRefusedFree(t, f, h, a, 64<<10)
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue)
	err := h.Close()
	h.mu.Lock()
	left, closed := len(h.parked), h.closed
	h.mu.Unlock()
	if err == nil || closed || left != 1 {
		t.Fatalf("Close with the clear refused: %v, closed %v, %d parked; want an error, open, 1",
			err, closed, left)
	}
	must(t, "Close again", h.Close())
}
