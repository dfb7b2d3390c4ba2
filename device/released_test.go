package device

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeStatsReleased: Stats.Released is false while the heap is open, stays false after a
// Close that the driver refused to give the memory back (the heap closed, its memory kept and
// counted), and is true once a later Close gave it back. Before, nothing in Stats told a
// closed heap from an open one that had given its memory back (package metrics reported a
// closed heap for ever).
func TestFakeStatsReleased(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	p := alloc(t, h, 1<<20, s)
	freeAll(t, h, []uintptr{p})
	if st := h.Stats(); st.Released || st.Arena.Committed == 0 {
		t.Fatalf("open heap: Released %v, committed %d; want false, not 0", st.Released, st.Arena.Committed)
	}
	// The unmap refused at Close's purge, the handle's release at the arena's give-back.
	f.FailAfter(fakecuda.CallUnmap, 0, fakecuda.ResultInvalidValue)
	f.FailAfter(fakecuda.CallRelease, 0, fakecuda.ResultInvalidValue)
	if err := h.Close(); err == nil {
		t.Fatal("Close with the unmap refused succeeded")
	}
	if st := h.Stats(); st.Released || st.Arena.Committed == 0 {
		t.Errorf("closed, its memory kept: Released %v, committed %d; want false, not 0", st.Released, st.Arena.Committed)
	}
	must(t, "second Close", h.Close())
	if st := h.Stats(); !st.Released {
		t.Errorf("closed, its memory given back: Released %v, committed %d; want true", st.Released, st.Arena.Committed)
	}
}
