package device

import (
	"errors"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeCloseParkedClearRefused: Close settles the parked entries once. When its clear of a
// held block's parked free is refused (FailAfter), the free stays parked, and Close returns
// that refusal and releases nothing; the next Close clears the block, frees it and closes the
// heap. The refusal Close returned was never stale: the entry was still parked.
//
// The refusal wraps ErrBusy (a free waits, nothing was released: Close again), with the
// driver's error and the words Sync and Trim say for the same entry, "device: " once. Before,
// it matched ErrBusy only when a capture refused the clear, not when the driver did.
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
	code, _ := pcuda.ResultCode(err)
	if !errors.Is(err, ErrBusy) || code != fakecuda.ResultInvalidValue ||
		!strings.Contains(err.Error(), "made at its last Release, waits") {
		t.Errorf("Close with the clear refused: %v; want an error wrapping ErrBusy and the "+
			"driver's refusal, saying the held block's free waits", err)
	}
	saysDeviceOnce(t, "Close with the clear refused", err)
	must(t, "Close again", h.Close())
}
