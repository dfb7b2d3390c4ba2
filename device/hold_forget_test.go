package device

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// heldBehind holds block p of n bytes, queues a memset of it on s (held back: f.Hold) and
// returns the hold: s's memset waits for the test.
func heldBehind(t *testing.T, f *fakecuda.Driver, h *Heap, p cuda.DevicePtr, n uintptr, s cuda.Stream) Hold {
	t.Helper()
	hd, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	f.Hold(true)
	must(t, "MemsetAsync on s", h.MemsetAsync(pcuda.DevicePtr(p), 0xAB, int(n), pcuda.Stream(s)))
	return hd
}

// heldFreedBehind is heldBehind, then a free of the block on s: the FreeAsync waits for the
// Release, s's memset for the test.
func heldFreedBehind(t *testing.T, f *fakecuda.Driver, h *Heap, p cuda.DevicePtr, n uintptr, s cuda.Stream) Hold {
	t.Helper()
	hd := heldBehind(t, f, h, p, n, s)
	must(t, "FreeAsync on s of the held block", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	return hd
}

// retireList keeps a free deferred on b (behind a memset held back) and polls until s's list,
// empty, has left the lists (listLinger polls), and returns that free's block.
func retireList(t *testing.T, h *Heap, a, b, s cuda.Stream, n uintptr) cuda.DevicePtr {
	t.Helper()
	q := alloc(t, h, n, a)
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(q), 0, int(n), pcuda.Stream(b)))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(b)))
	for range listLinger + 1 {
		_ = h.Stats()
	}
	h.mu.Lock()
	l := h.lists.Lookup(uintptr(s))
	h.mu.Unlock()
	if l != nil {
		t.Fatal("s's list stayed in the lists: the test proves nothing")
	}
	return q
}

// reusedBehind allocates n bytes on a and writes them while s's memset of p may be held back
// still, then runs every stream's work: the bytes must survive. It returns the block.
func reusedBehind(t *testing.T, f *fakecuda.Driver, h *Heap, p cuda.DevicePtr, n uintptr, a cuda.Stream) (q cuda.DevicePtr) {
	t.Helper()
	q = alloc(t, h, n, a)
	want := pattern(int(n), 0x5C)
	must(t, "HtoD", h.HtoD(pcuda.DevicePtr(q), want))
	f.Hold(false)
	f.Complete()
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
	if !bytes.Equal(got, want) {
		t.Errorf("the Alloc after the Release got %s, and its bytes are %s",
			pick(q == p, "the held block, freed on s", "another block"),
			intactBy(bytes.Equal(got, want), "s's memset"))
	}
	return q
}

// TestFakeHoldForgetStreamWaits: a held block freed on stream s, whose list has left the lists
// (empty for listLinger polls) and which has no heap: ForgetStream(s) must still wait for s, as
// the free, made at the last Release, is then a plain free (s forgotten). Before, ForgetStream
// found nothing of s's and returned at once, s's memset of the block still queued; the block,
// freed at the Release, came back from the next Alloc and the memset overwrote its new bytes.
func TestFakeHoldForgetStreamWaits(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	hd := heldFreedBehind(t, f, h, p, n, s)
	retireList(t, h, a, b, s, n)
	must(t, "ForgetStream s", h.ForgetStream(pcuda.Stream(s)))
	must(t, "StreamDestroy s", dev.StreamDestroy(s))
	must(t, "Release", hd.Release())
	r := reusedBehind(t, f, h, p, n, a)
	must(t, "Sync", h.Sync())
	must(t, "Verify", h.Verify())
	freeAll(t, h, []cuda.DevicePtr{r})
	if st := h.Stats(); st.Live != 0 || st.Deferred != 0 {
		t.Errorf("after every free: %d live, %d deferred; want none", st.Live, st.Deferred)
	}
}

// TestFakeHoldForgetStreamCapturing: ForgetStream(s) refused while s captures a CUDA graph keeps
// s: a held block's free on s, made at the last Release after s's list has left the lists, must
// still wait for s. Before, the refused ForgetStream had marked s forgotten already, and the
// Release made the free a plain one, s's memset of the block still queued: the next Alloc got
// the block and the memset overwrote its new bytes.
func TestFakeHoldForgetStreamCapturing(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, b, s := newStream(t, dev, h), newStream(t, dev, h), newStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	hd := heldFreedBehind(t, f, h, p, n, s)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(s, cuda.CaptureGlobal))
	ferr := h.ForgetStream(pcuda.Stream(s))
	g, cerr := dev.StreamEndCapture(s)
	must(t, "StreamEndCapture", cerr)
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	if !errors.Is(ferr, pcuda.ErrCapturing) {
		t.Fatalf("ForgetStream of a capturing stream = %v, want an error matching cuda.ErrCapturing", ferr)
	}
	retireList(t, h, a, b, s, n)
	must(t, "Release", hd.Release())
	r := reusedBehind(t, f, h, p, n, a)
	must(t, "Sync", h.Sync())
	must(t, "Verify", h.Verify())
	freeAll(t, h, []cuda.DevicePtr{r})
}

// TestFakeHoldParkedStream: a held block freed on stream s, which the user then destroys, and
// whose ForgetStream a capture on another stream refuses: s is parked, its work waited for only
// by a synchronize of the context. The free, made at the last Release, must wait for that
// synchronize too. Before, the Release found s forgotten and made the free a plain one, s's
// memset of the block still queued: the next Alloc got the block and the memset overwrote its
// new bytes.
func TestFakeHoldParkedStream(t *testing.T) { holdParked(t, false) }

// TestFakeHoldParkedStreamZeroOnFree is TestFakeHoldParkedStream with Options.ZeroOnFree: the
// block is cleared once the synchronize of the context has run s's memset, not before, and
// comes back zero.
func TestFakeHoldParkedStreamZeroOnFree(t *testing.T) { holdParked(t, true) }

func holdParked(t *testing.T, zero bool) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: zero})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c) // c has a heap: the heap sees its capture
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	hd := heldFreedBehind(t, f, h, p, n, s)
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(s))
	forgetDuringCapture(t, dev, h, c, s, nil)
	must(t, "Release", hd.Release())
	if st := h.Stats(); st.Deferred != 1 || st.Live != 2 {
		t.Errorf("after the Release: %d deferred, %d live; want 1 (the held block's free, parked), 2", st.Deferred, st.Live)
	}
	if ds := h.DeferredByStream(); len(ds) != 1 || ds[0].Stream != pcuda.Stream(s) || ds[0].Blocks != 1 || !ds[0].Parked {
		t.Errorf("DeferredByStream = %+v, want the held block's free, parked under s's handle %#x", ds, s)
	}
	must(t, "Verify", h.Verify())
	r := reusedBehind(t, f, h, p, n, a)
	must(t, "Sync", h.Sync()) // synchronizes the context: the parked free is done
	if st := h.Stats(); st.Deferred != 0 || st.Live != 2 {
		t.Errorf("after Sync: %d deferred, %d live; want 0, 2", st.Deferred, st.Live)
	}
	must(t, "Verify", h.Verify())
	if zero {
		q := alloc(t, h, n, a) // the block freed by Sync, back in a's heap
		if q != p {
			t.Fatalf("a's Alloc got %#x, not the block %#x Sync freed: the test proves nothing", q, p)
		}
		got := make([]byte, n)
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
		if !bytes.Equal(got, make([]byte, n)) {
			t.Error("ZeroOnFree: the held block freed on a parked stream came back with s's bytes")
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(q)))
	}
	freeAll(t, h, []cuda.DevicePtr{keep, r})
	if st := h.Stats(); st.Live != 0 {
		t.Errorf("%d live after every free, want 0", st.Live)
	}
}
