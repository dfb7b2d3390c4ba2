package device

import (
	"runtime"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// fakePause is the fake driver's control FC_PAUSE (internal/fakecuda's PauseNextCall), which
// cuda.Device.HookCaptureCheck has the library's check call: the call the check allows stops.
const fakePause = 18

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
	must(t, "HookCaptureCheck", dev.HookCaptureCheck("fake_ctl", fakePause, 0))
	stats := make(chan Stats, 1)
	go func() { stats <- h.Stats() }()
	until(t, f.ResumeCall, "the poll made no driver call after its check", f.Paused)
	th := captureThread(t)
	begun := th(func() error { return dev.StreamBeginCapture(s, cuda.CaptureGlobal) })
	var berr error
	until(t, f.ResumeCall, "the begin of the capture neither ended nor waits", func() bool {
		select {
		case berr = <-begun:
			begun = nil
			return true
		default:
			return cuda.CaptureBeginsWaiting() > 0
		}
	})
	f.ResumeCall()
	st := <-stats
	if begun != nil {
		berr = <-begun
	}
	must(t, "StreamBeginCapture", berr)
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

// until waits until cond holds, or calls resume and fails the test with why.
func until(t *testing.T, resume func(), why string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			resume()
			t.Fatal(why)
		}
	}
}

// captureThread returns a function that runs calls on a goroutine locked to its OS thread, for
// the test's lifetime (a capture in CaptureGlobal mode ends on the thread that began it); each
// call's error comes back on the channel returned.
func captureThread(t *testing.T) func(func() error) <-chan error {
	calls := make(chan func(), 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for c := range calls {
			c()
		}
	}()
	t.Cleanup(func() { close(calls) })
	return func(f func() error) <-chan error {
		done := make(chan error, 1)
		calls <- func() { done <- f() }
		return done
	}
}
