package device

import (
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakePurgeTickMakesNoClear: with Options.ZeroOnFree, the free of a held block whose memset
// the driver refused at its last Release is parked, to be cleared on the legacy stream and
// waited for once a synchronize of the context has passed it. When that synchronize is made by
// a call that does not settle the parked frees (an Alloc's poll answering a stream destroyed
// without ForgetStream), a tick of the idle purge must not make the clear: the purger waits
// for nothing while it holds the heap's mutex (an Alloc would wait for the device behind it)
// and queues nothing on the legacy stream (a barrier between the user's blocking streams). The
// clear is left to Stats, Sync, Trim or Close. Before, the tick's settle of the parked entries
// cleared the block and synchronized the legacy stream.
func TestFakePurgeTickMakesNoClear(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: time.Hour, ZeroOnFree: true})
	if f == nil {
		return
	}
	h.mu.Lock()
	h.purge.manual = true
	h.mu.Unlock()
	a := newStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	hd, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue)
	must(t, "Release", hd.Release()) // the memset refused: the free parked
	h.mu.Lock()
	parked := len(h.parked)
	h.mu.Unlock()
	if parked != 1 {
		t.Fatalf("after the last Release whose memset was refused: %d entries parked; want 1", parked)
	}

	// A stream destroyed without ForgetStream with a free deferred on it: the next Alloc's poll
	// finds it refused and synchronizes the context (Recover), which passes the parked free.
	A, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	q := alloc(t, h, n, a)
	must(t, "FreeAsync on A", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(A)))
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(A))
	r := alloc(t, h, n, a)
	h.mu.Lock()
	passed := !h.parkedSyncWaits(nil)
	h.mu.Unlock()
	if !passed {
		t.Fatalf("the Alloc's poll made no synchronize of the context: the test proves nothing")
	}

	syncs := f.Stat(fakecuda.StreamSyncs)
	h.purgeTick()
	if got := f.Stat(fakecuda.StreamSyncs) - syncs; got != 0 {
		t.Errorf("a purge tick made %d cuStreamSynchronize calls (the parked free's clear); want none", got)
	}
	h.mu.Lock()
	parked = len(h.parked)
	h.mu.Unlock()
	if parked != 1 {
		t.Errorf("after a purge tick: %d entries parked; want the free still parked, for Stats, Sync, Trim or Close", parked)
	}
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Deferred != 0 || st.Live != 1 {
		t.Errorf("after Sync: %d live, %d deferred; want 1 (r), 0", st.Live, st.Deferred)
	}
	must(t, "Free", h.Free(pcuda.DevicePtr(r)))
}
