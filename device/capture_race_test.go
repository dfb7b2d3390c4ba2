package device

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeStatsRacingCaptureBegin: a Stats on another goroutine polls a free deferred on s
// (a's block, s busy with a held memset) and has found s not capturing when the user begins a
// capture on s (the poll's query stopped there by the fake's pause). The poll then queried the
// capturing stream: the driver refused it and invalidated the user's capture, whose end failed
// (the long model test's "capture no longer active", 1 run in 5). The begin now waits for the
// poll: the capture ends with a graph, and the free waits for s, then comes back.
func TestFakeStatsRacingCaptureBegin(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, s := newStream(t, dev, h), newStream(t, dev, h)
	const n = 4096
	q, p := alloc(t, h, n, s), alloc(t, h, n, a)
	f.Hold(true)
	must(t, "MemsetAsync on s", h.MemsetAsync(pcuda.DevicePtr(q), 1, n, pcuda.Stream(s)))
	must(t, "FreeAsync on s", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	must(t, "PauseAfterCaptureCheck", f.PauseAfterCaptureCheck(dev))
	stats := make(chan Stats, 1)
	go func() { stats <- h.Stats() }()
	th := fakecuda.LockedThread(t)
	_, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(s, cuda.CaptureGlobal) })
	st := <-stats
	must(t, "StreamBeginCapture", begun())
	err := <-th(func() error {
		g, err := dev.StreamEndCapture(s)
		if err == nil {
			err = dev.GraphDestroy(g)
		}
		return err
	})
	if err != nil {
		t.Fatalf("a Stats on another goroutine invalidated the user's capture: %v", err)
	}
	if st.Deferred != 1 {
		t.Errorf("the Stats racing the begin: %d frees deferred, want 1 (s's memset is held)", st.Deferred)
	}
	f.Hold(false)
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Deferred != 0 {
		t.Errorf("after s ran its work: %d frees deferred, want 0", st.Deferred)
	}
	freeAll(t, h, []cuda.DevicePtr{q})
}
