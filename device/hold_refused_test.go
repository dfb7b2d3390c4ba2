package device

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeHoldFreeAsyncClearRefused: with Options.ZeroOnFree, a held block freed on stream s
// whose last Release comes while s captures a CUDA graph: the driver refuses the block's memset
// on s. The free must not be lost, nor made before s's work on the block has run: it waits for
// a synchronize of the context, and the block comes back cleared. Before, the Release returned
// the memset's refusal and left the block live with no free pending, lost until Close.
func TestFakeHoldFreeAsyncClearRefused(t *testing.T) { holdClearRefused(t, true) }

// TestFakeHoldFreeClearRefused is TestFakeHoldFreeAsyncClearRefused for a held block's Free,
// whose memset, on the legacy stream, the driver refuses while a blocking stream captures.
func TestFakeHoldFreeClearRefused(t *testing.T) { holdClearRefused(t, false) }

func holdClearRefused(t *testing.T, async bool) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, s := newStream(t, dev, h), newStream(t, dev, h)
	c := newBlockingStream(t, dev, h) // captures in the Free's case
	const n = 64 << 10
	p := alloc(t, h, n, a)
	hd := heldBehind(t, f, h, p, n, s)
	on := c
	if async {
		must(t, "FreeAsync on s of the held block", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
		on = s
	} else {
		must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
	}
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(on, cuda.CaptureGlobal))
		must(t, "Release", hd.Release())
		if err := h.Sync(); !errors.Is(err, pcuda.ErrCapturing) {
			t.Errorf("Sync during the capture = %v, want an error matching cuda.ErrCapturing", err)
		}
		g, err := dev.StreamEndCapture(on)
		must(t, "StreamEndCapture", err)
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}()
	if st := h.Stats(); st.Deferred != 1 || st.Live != 1 {
		t.Errorf("after the Release: %d deferred, %d live; want 1 (the free, waiting), 1", st.Deferred, st.Live)
	}
	must(t, "Verify", h.Verify())
	r := reusedBehind(t, f, h, p, n, a) // s's memset runs after this Alloc
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Deferred != 0 || st.Live != 1 {
		t.Errorf("after Sync: %d deferred, %d live; want 0, 1", st.Deferred, st.Live)
	}
	must(t, "Verify", h.Verify())
	q := alloc(t, h, n, a)
	if q != p {
		t.Fatalf("a's Alloc got %#x, not the block %#x Sync freed: the test proves nothing", q, p)
	}
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
	if !bytes.Equal(got, make([]byte, n)) {
		t.Error("ZeroOnFree: the held block came back with s's bytes")
	}
	freeAll(t, h, []cuda.DevicePtr{q, r})
}

// TestFakeHoldClearRefusedTwice: a held block's Free whose memset the driver refused at the
// last Release (TestFakeHoldFreeClearRefused) is parked; the context is synchronized since, and
// a blocking stream captures again when the heap next settles the parked frees: the clear is
// refused a second time, and the block must stay parked, neither freed nor handed out with s's
// bytes. Once the capture has ended, a Sync clears and frees it. No test failed when the settle
// freed the block after its refused clear.
//
// The refusal says what happens to the block: it is freed already, kept parked, and cleared and
// given back at a later call; before, it ended with the advice of a Free's refused clear, "free
// it once the capture has ended", to free a block already freed.
func TestFakeHoldClearRefusedTwice(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, s := newStream(t, dev, h), newStream(t, dev, h)
	c := newBlockingStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	hd := heldBehind(t, f, h, p, n, s)
	must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
	duringCapture(t, dev, c, "the Release", func() { must(t, "Release", hd.Release()) }) // its clear refused: parked
	f.Hold(false)
	h.mu.Lock()
	err := h.points().WaitAll() // the context synchronized since the park, by any of the heap's waits
	h.mu.Unlock()
	must(t, "synchronize the context", err)
	var st Stats
	var serr error
	duringCapture(t, dev, c, "Stats and Sync", func() {
		st = h.Stats()  // the settle: its clear refused again
		serr = h.Sync() // refused so too, and says so
	})
	if !errors.Is(serr, pcuda.ErrCapturing) {
		t.Errorf("Sync during the capture: %v; want an error matching cuda.ErrCapturing", serr)
	}
	saysDeviceOnce(t, "Sync during the capture", serr)
	parkedSays(t, "Sync during the capture", serr)
	if st.Deferred != 1 || st.Live != 1 {
		t.Errorf("after the second refused clear: %d deferred, %d live; want 1, 1 (still parked)", st.Deferred, st.Live)
	}
	must(t, "Sync", h.Sync())
	q := alloc(t, h, n, a)
	if q != p {
		t.Fatalf("a's Alloc got %#x, not the block %#x Sync freed: the test proves nothing", q, p)
	}
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
	if !bytes.Equal(got, make([]byte, n)) {
		t.Error("ZeroOnFree: the held block came back with s's bytes")
	}
	freeAll(t, h, []cuda.DevicePtr{q})
}

// parkedSays checks that err, a parked held block's clear refused during a capture, says the
// block stays parked and goes back at a later call, not to free it (it is freed already).
func parkedSays(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if s := err.Error(); strings.Contains(s, "free it") || !strings.Contains(s, "kept parked") ||
		!strings.Contains(s, "at a later call once the capture has ended") {
		t.Errorf("%s: %q; want it to say the block is kept parked and given back at a later "+
			"call once the capture has ended, not to free it", what, s)
	}
	if n := strings.Count(err.Error(), "kept parked"); n != 1 {
		t.Errorf("%s: %q says the refused clear %d times, want once", what, err, n)
	}
}
