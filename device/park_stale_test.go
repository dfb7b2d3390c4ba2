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

// parkRefusedFree parks the free of a held block of n bytes on stream a (Options.ZeroOnFree):
// its memset refused at the last Release (FailAfter), it waits in h.parked.
func parkRefusedFree(t *testing.T, f *fakecuda.Driver, h *Heap, a cuda.Stream, n uintptr) {
	t.Helper()
	p := alloc(t, h, n, a)
	hd, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue)
	must(t, "Release", hd.Release())
	h.mu.Lock()
	parked := len(h.parked) > 0 && h.parked[len(h.parked)-1].refused
	h.mu.Unlock()
	if !parked {
		t.Fatalf("the free of the held block whose memset was refused at its last Release: not parked")
	}
}

// parkPassedRefusedFree parks the free of a held block of n bytes on stream a (Options.ZeroOnFree)
// whose clear the driver refused after a synchronize of the context had passed it: it waits for
// its clear alone. Close's one settle makes that synchronize (its clear refused by FailAfter).
func parkPassedRefusedFree(t *testing.T, f *fakecuda.Driver, h *Heap, a cuda.Stream, n uintptr) {
	t.Helper()
	parkRefusedFree(t, f, h, a, n)
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue)
	if err := h.Close(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Close with the clear of a parked free refused: %v; want ErrBusy", err)
	}
	h.mu.Lock()
	pts := h.points()
	waits := slices.ContainsFunc(h.parked, func(ps parkedStream) bool {
		return !ps.freed && !pts.SyncedSince(ps.mark)
	})
	h.mu.Unlock()
	if waits {
		t.Fatalf("after Close's synchronize: a parked entry waits for one still")
	}
}

// TestFakeTrimStaleRefusalBesideParkedHeap: Trim settles the parked entries twice; when the
// first settle's clear of a held block's parked free is refused and the second clears it and
// frees it, Trim returns no error, even while another entry stays parked for a reason that is
// no error (a parked heap kept for its live block). Before, Trim dropped the first settle's
// refusal only when nothing at all was left parked, and returned it here for a free it had
// made.
func TestFakeTrimStaleRefusalBesideParkedHeap(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	s, live, endCapture := parkDestroyed(t, f, dev, h, a, c, 64<<10, true)
	endCapture()
	f.Hold(false)
	must(t, "Trim", h.Trim()) // the parked heap kept for its live block
	parkRefusedFree(t, f, h, a, 64<<10)
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue) // the first settle's clear
	if err := h.Trim(); err != nil {
		t.Errorf("Trim with the first clear refused, the second made: %v; want nil", err)
	}
	h.mu.Lock()
	left := len(h.parked)
	h.mu.Unlock()
	if st := h.Stats(); st.Deferred != 0 || left != 1 {
		t.Fatalf("after Trim: %d deferred, %d parked; want 0, 1 (the heap of s, for its live block)",
			st.Deferred, left)
	}
	freeAll(t, h, []cuda.DevicePtr{live, keep})
	must(t, "ForgetStream of the parked stream", h.ForgetStream(pcuda.Stream(s)))
}

// TestFakeSyncStaleRefusalBesideParkedFree: Sync settles the parked entries twice; when the
// first settle's clear of a held block's parked free (passed by a synchronize of the context
// already) is refused and the second clears it and frees it, Sync says no refusal of it, even
// while a parked stream's free still waits for a synchronize that a capture refuses (Sync says
// that: cuda.ErrCapturing). Before, Sync dropped the first settle's refusal only when no parked
// free waited at all, and returned it here for a free it had made.
func TestFakeSyncStaleRefusalBesideParkedFree(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	parkRefusedFree(t, f, h, a, 64<<10)
	// Close's one settle synchronizes the context, and its clear is refused: the free stays
	// parked, passed by that synchronize.
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue)
	if err := h.Close(); err == nil {
		t.Fatalf("Close with the clear refused: nil; want its refusal")
	}
	keep := alloc(t, h, 4096, c)
	// A stream s destroyed with a free queued, and a ForgetStream(s) refused during a capture
	// on c: s parked, its free waiting for a synchronize of the context. That ForgetStream
	// tries the held block's free again: its clear refused too, it stays parked.
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	p := alloc(t, h, 64<<10, a) // freed on s: deferred there
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	must(t, "FreeAsync on s", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(s))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue)
	if err := h.ForgetStream(pcuda.Stream(s)); !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("ForgetStream of a destroyed stream during a capture: %v; want an error "+
			"matching cuda.ErrCapturing", err)
	}
	h.mu.Lock()
	refused := slices.ContainsFunc(h.parked, func(ps parkedStream) bool { return ps.refused })
	h.mu.Unlock()
	if !refused {
		t.Fatalf("the held block's free was made during the capture; the test needs it parked")
	}
	f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue) // the first settle's clear
	err = h.Sync()
	if !errors.Is(err, pcuda.ErrCapturing) || strings.Contains(err.Error(), "held block") {
		t.Errorf("Sync during the capture with the first clear refused, the second made: %v; "+
			"want an error matching cuda.ErrCapturing, about no held block's free", err)
	}
	h.mu.Lock()
	refused = slices.ContainsFunc(h.parked, func(ps parkedStream) bool { return ps.refused })
	h.mu.Unlock()
	if refused {
		t.Errorf("after Sync: the held block's free still parked; want it made")
	}
	g, err := dev.StreamEndCapture(c)
	must(t, "StreamEndCapture (the heap left the capture valid)", err)
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	f.Hold(false)
	must(t, "Sync after the capture", h.Sync())
	freeAll(t, h, []cuda.DevicePtr{keep})
}
