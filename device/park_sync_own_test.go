package device

import (
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeSyncCaptureNotForParkedHeap: Sync says a capture's refusal of the synchronize of the
// context only when a parked free waits for that synchronize. Here the only entry that waits for
// it is a parked heap with no free (its memory is Trim's), and the only parked free waits for its
// clear alone, which the capture (on a blocking stream: it holds the legacy stream, where the
// clear runs) refuses: Sync says that refusal, the held block's, and not the synchronize's.
// Before, Sync kept the synchronize's refusal ("their deferred frees and memory stay parked")
// while any parked free stayed, whatever it waited for.
func TestFakeSyncCaptureNotForParkedHeap(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	a, c := newStream(t, dev, h), newBlockingStream(t, dev, h)
	parkPassedRefusedFree(t, f, h, a, 64<<10)
	keep := alloc(t, h, 4096, c)
	// s, destroyed with its heap holding memory and no free deferred, parked by a ForgetStream(s)
	// refused during a capture on c: its heap waits for a synchronize of the context.
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	p := alloc(t, h, 64<<10, s)
	must(t, "FreeAsync on its own stream", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	must(t, "synchronize the context", dev.Synchronize())
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(s))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	if err := h.ForgetStream(pcuda.Stream(s)); !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("ForgetStream of a destroyed stream during a capture: %v; want an error "+
			"matching cuda.ErrCapturing", err)
	}
	h.mu.Lock()
	heapWaits := h.parkedWaits(pcuda.Stream(s))
	refused := len(h.parked) == 2 && h.parked[0].refused && h.parked[0].list != nil
	heapOnly := len(h.parked) == 2 && h.parked[1].sh != nil && h.parkedFrees() == 1
	h.mu.Unlock()
	if !heapWaits || !refused || !heapOnly {
		t.Fatalf("parked: s's heap waits %v, a refused free %v, s's heap alone %v; want all true",
			heapWaits, refused, heapOnly)
	}
	err = h.Sync()
	if !errors.Is(err, pcuda.ErrCapturing) || !strings.Contains(err.Error(), "held block") ||
		strings.Contains(err.Error(), "synchronize of the context") {
		t.Errorf("Sync during the capture, with no parked free waiting for a synchronize of the "+
			"context: %v; want the held block's refused clear alone, not the synchronize's "+
			"refusal", err)
	}
	g, err := dev.StreamEndCapture(c)
	must(t, "StreamEndCapture (the heap left the capture valid)", err)
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	must(t, "Sync after the capture", h.Sync())
	must(t, "Trim after the capture", h.Trim())
	h.mu.Lock()
	left := len(h.parked)
	h.mu.Unlock()
	if left != 0 {
		t.Errorf("after the capture: %d parked; want 0", left)
	}
	freeAll(t, h, []cuda.DevicePtr{keep})
}

// syncMadeBetweenSettles parks, beside a held block's free that waits for its clear alone
// (parkPassedRefusedFree), a destroyed stream t's free that waits for a synchronize of the
// context (a ForgetStream(t) refused during a capture), and leaves another destroyed stream u
// with a free deferred, not parked; then calls call (Sync or Trim) during that capture, with
// both of its clears of the held block refused (FailAfter), and the capture ended between its
// two settles (betweenSettles). Its first settle's synchronize is refused; its drain answers u,
// which the driver refuses, with a synchronize of the context, which passes t's free, done by its
// second settle. It returns call's error; ran is false in the test process (fakecuda.RunDevice).
func syncMadeBetweenSettles(t *testing.T, call func(h *Heap) error) (err error, ran bool) {
	t.Helper()
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return nil, false
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	parkPassedRefusedFree(t, f, h, a, 64<<10)
	keep := alloc(t, h, 4096, c)
	defer freeAll(t, h, []cuda.DevicePtr{keep})
	ts, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	u, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	p1, p2 := alloc(t, h, 64<<10, a), alloc(t, h, 64<<10, a)
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	must(t, "FreeAsync on t", h.FreeAsync(pcuda.DevicePtr(p1), pcuda.Stream(ts)))
	must(t, "FreeAsync on u", h.FreeAsync(pcuda.DevicePtr(p2), pcuda.Stream(u)))
	must(t, "StreamDestroy of t, without ForgetStream", dev.StreamDestroy(ts))
	must(t, "StreamDestroy of u, without ForgetStream", dev.StreamDestroy(u))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	ended := false
	endCapture := func() {
		if ended {
			return
		}
		ended = true
		g, err := dev.StreamEndCapture(c)
		must(t, "StreamEndCapture (the heap left the capture valid)", err)
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}
	defer endCapture()
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue) // ForgetStream's clear
	if err := h.ForgetStream(pcuda.Stream(ts)); !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("ForgetStream of destroyed t during a capture: %v; want cuda.ErrCapturing", err)
	}
	h.mu.Lock()
	tWaits, frees := h.parkedWaits(pcuda.Stream(ts)), h.parkedFrees()
	h.mu.Unlock()
	if !tWaits || frees != 2 {
		t.Fatalf("parked: t waits for a synchronize %v, %d frees; want true, 2", tWaits, frees)
	}
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue) // the first settle's clear
	betweenSettles = func() {
		endCapture()
		f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue) // the second's
	}
	err = call(h)
	betweenSettles = nil
	if !ended {
		t.Fatalf("the call made no second settle")
	}
	h.mu.Lock()
	tParked, pts := h.parkedAs(pcuda.Stream(ts)), h.points()
	waits := slices.ContainsFunc(h.parked, func(ps parkedStream) bool {
		return !ps.freed && !pts.SyncedSince(ps.mark)
	})
	frees = h.parkedFrees()
	h.mu.Unlock()
	if tParked || waits || frees != 1 {
		t.Fatalf("after the call: t parked %v, an entry waits for a synchronize %v, %d parked "+
			"frees; want false, false, 1 (the held block's, its clear refused)", tParked, waits,
			frees)
	}
	f.Hold(false)
	must(t, "Sync after the capture", h.Sync())
	return err, true
}

// TestFakeSyncSynchronizeRefusalGone and TestFakeTrimSynchronizeRefusalGone: a Sync or Trim
// whose first settle's synchronize of the context a capture refused, and whose drain made one
// once the capture had ended (syncMadeBetweenSettles), says no refusal of that synchronize: it
// passed every parked entry, and the call's second settle gave back what waited for it. It says
// the held block's refused clear, which keeps its free parked. Before, they kept the capture's
// refusal while any entry stayed parked, whatever kept it.
func TestFakeSyncSynchronizeRefusalGone(t *testing.T) {
	testSynchronizeRefusalGone(t, "Sync", (*Heap).Sync)
}

func TestFakeTrimSynchronizeRefusalGone(t *testing.T) {
	testSynchronizeRefusalGone(t, "Trim", (*Heap).Trim)
}

func testSynchronizeRefusalGone(t *testing.T, name string, call func(h *Heap) error) {
	t.Helper()
	err, ran := syncMadeBetweenSettles(t, call)
	if !ran {
		return
	}
	if !errors.Is(err, pcuda.ErrInvalidValue) || !strings.Contains(err.Error(), "held block") ||
		errors.Is(err, pcuda.ErrCapturing) || strings.Contains(err.Error(), "synchronize") {
		t.Errorf("%s, its synchronize of the context refused by a capture, then made: %v; want "+
			"the held block's refused clear alone, not the synchronize's refusal", name, err)
	}
}
