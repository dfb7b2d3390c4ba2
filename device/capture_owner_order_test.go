package device

// A synchronous write into a block (HtoD, DtoD, a ZeroOnFree clear) comes after the work queued
// on the stream the block was allocated on (afterOwner): the block may have been freed there and
// reused at once, its old owner's work still queued. While a CUDA graph capture held that
// stream, no point could be recorded there, and the write was ordered after nothing: it ran
// first, and the old owner's work, run later, wrote over it. Now it is refused then
// (cuda.ErrCapturing), unless the heap knows the stream has passed every free of its heap.

import (
	"errors"
	"runtime"
	"testing"
	"time"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// reusedInCapture allocates a block of n bytes on a, queues a copy of old into it on a (held by
// the fake), frees it on a, begins a capture on a and allocates the same block again during it.
// It returns the block and a function that ends the capture and runs a's work.
func reusedInCapture(t *testing.T, dev *cuda.Device, h *Heap, a cuda.Stream, n uintptr, old []byte) (cuda.DevicePtr, func()) {
	t.Helper()
	p := alloc(t, h, n, a)
	must(t, "HtoDAsync of the old owner on a", h.HtoDAsync(pcuda.DevicePtr(p), old, pcuda.Stream(a)))
	must(t, "FreeAsync on a", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
	runtime.LockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(a, cuda.CaptureRelaxed))
	p2 := alloc(t, h, n, a)
	if p2 != p {
		t.Fatalf("the block freed on a came back at %#x, not %#x: the test proves nothing", p2, p)
	}
	return p2, func() {
		g, err := dev.StreamEndCapture(a)
		runtime.UnlockOSThread()
		must(t, "StreamEndCapture", err)
		must(t, "GraphDestroy", dev.GraphDestroy(g))
		must(t, "synchronize a", dev.StreamSynchronize(a))
	}
}

// TestFakeHtoDDuringOwnerCapture: HtoD into a block reused on its stream a while a capture holds
// a. Before the fix it returned nil, and the old owner's copy, run after, left its bytes in the
// block in place of HtoD's. Now it is refused (cuda.ErrCapturing), nothing copied, and the same
// HtoD after the capture lands.
func TestFakeHtoDDuringOwnerCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	const n = 64 << 10
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	defer f.Complete()
	old, want := pattern(n, 0xA0), pattern(n, 0xB0)
	p, endCapture := reusedInCapture(t, dev, h, a, n, old)
	err := h.HtoD(pcuda.DevicePtr(p), want)
	endCapture()
	f.Hold(false)
	if err != nil {
		if !errors.Is(err, pcuda.ErrCapturing) {
			t.Fatalf("HtoD during the capture on the block's stream: %v; want nil or cuda.ErrCapturing", err)
		}
		must(t, "HtoD after the capture", h.HtoD(pcuda.DevicePtr(p), want))
	}
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(p)))
	if i := firstDiff(got, want); i >= 0 {
		t.Errorf("HtoD during a capture on the block's stream returned %v, and byte %d of %d is %#x, want %#x (the old owner's copy, %#x, ran after it)",
			err, i, n, got[i], want[i], old[i])
	}
	freeAll(t, h, []cuda.DevicePtr{p})
}

// TestFakeHtoDDuringOwnerCaptureAfterPass: the same write goes ahead during the capture once
// the heap knows a's work up to its last free has run, and lands: the capture refuses only what
// it must. The heap learns it from a synchronize of a (Trim) or from a purge request of a's
// heap handed back (the purger's ticks, called here by hand: the next test).
func TestFakeHtoDDuringOwnerCaptureAfterPass(t *testing.T) { htodDuringCaptureAfterPass(t, "Trim") }

// TestFakeHtoDDuringOwnerCaptureAfterPurge is TestFakeHtoDDuringOwnerCaptureAfterPass, the heap
// learning it from its purger.
func TestFakeHtoDDuringOwnerCaptureAfterPurge(t *testing.T) { htodDuringCaptureAfterPass(t, "purge") }

func htodDuringCaptureAfterPass(t *testing.T, by string) {
	delay := time.Hour // a purger whose ticks the test makes
	if by == "Trim" {
		delay = -1 // none: Trim alone tells
	}
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: delay})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	const n = 64 << 10
	keep := alloc(t, h, n, a)
	old, want := pattern(n, 0xA0), pattern(n, 0xB0)
	p := alloc(t, h, n, a)
	must(t, "HtoDAsync of the old owner on a", h.HtoDAsync(pcuda.DevicePtr(p), old, pcuda.Stream(a)))
	must(t, "FreeAsync on a", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
	passed := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.freesPassed(pcuda.Stream(a))
	}
	if passed() {
		t.Fatal("a's free passed as it was made: the test proves nothing")
	}
	if by == "Trim" {
		must(t, "Trim", h.Trim())
	} else {
		for i := 0; i < 10 && !passed(); i++ {
			h.purgeTick()
		}
	}
	if !passed() {
		t.Fatalf("by %s: the heap never learned that a passed its free", by)
	}
	runtime.LockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(a, cuda.CaptureRelaxed))
	q := alloc(t, h, n, a)
	err := h.HtoD(pcuda.DevicePtr(q), want)
	g, eerr := dev.StreamEndCapture(a)
	runtime.UnlockOSThread()
	must(t, "StreamEndCapture", eerr)
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	if err != nil {
		t.Fatalf("HtoD during a capture on a, every free on a passed (%s): %v; want it made", by, err)
	}
	must(t, "synchronize a", dev.StreamSynchronize(a))
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
	if i := firstDiff(got, want); i >= 0 {
		t.Errorf("byte %d of %d is %#x, want %#x", i, n, got[i], want[i])
	}
	freeAll(t, h, []cuda.DevicePtr{q, keep})
}
