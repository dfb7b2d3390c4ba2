package device

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeParkedSyncBounded: the synchronize of the context that a parked stream waits for is
// made only while something parked waits for one, and once for all of it. With nothing parked,
// Sync, Trim, ForgetStream and an Alloc out of memory make none; with a stream parked (its heap
// kept after the synchronize for a block allocated on it and still live), the first Sync makes
// one and the same calls after it none.
func TestFakeParkedSyncBounded(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, b, c := newStream(t, dev, h), newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	mark := func() uint64 {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.points().SyncMark()
	}
	calls := func(what string) {
		t.Helper()
		before := mark()
		must(t, "Sync", h.Sync())
		must(t, "Trim", h.Trim())
		q := alloc(t, h, 4096, b)
		must(t, "Free", h.Free(pcuda.DevicePtr(q)))
		must(t, "ForgetStream(b)", h.ForgetStream(pcuda.Stream(b)))
		if _, err := h.Alloc(64<<20, pcuda.Stream(a)); err == nil {
			t.Fatal("an Alloc beyond the capacity succeeded")
		}
		if n := mark() - before; n != 0 {
			t.Errorf("%s: %d synchronizes of the context; want none", what, n)
		}
	}
	calls("nothing parked")
	_, live, endCapture := parkDestroyed(t, f, dev, h, a, c, 64<<10, true)
	endCapture()
	before := mark()
	must(t, "Sync", h.Sync())
	if n := mark() - before; n != 1 {
		t.Errorf("the first Sync after the park: %d synchronizes of the context; want 1", n)
	}
	calls("a parked heap kept for its live block, passed")
	if st := h.Stats(); st.Streams != 3 || st.Deferred != 0 {
		t.Errorf("%d streams, %d deferred; want 3 (a, c and the parked one; b forgotten), 0", st.Streams, st.Deferred)
	}
	freeAll(t, h, []cuda.DevicePtr{live, keep})
	if st := h.Stats(); st.Streams != 2 {
		t.Errorf("after its last block's free: %d streams; want 2 (the parked heap closed)", st.Streams)
	}
}
