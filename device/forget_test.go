package device

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// destroyedWithFrees makes stream s, has the heap see it, and destroys it without ForgetStream
// while work is held there: a block of s's own heap (mine) and one of stream a's (theirs), each
// cleared by a memset queued on s and freed on s (mine goes back to s's heap at once, theirs
// waits on s's list of deferred frees). The driver refuses s's handle from then on and still runs
// the memsets, which are still queued when it returns (Hold on).
func destroyedWithFrees(t *testing.T, f *fakecuda.Driver, dev *cuda.Device, h *Heap, a cuda.Stream, n uintptr) (s cuda.Stream, mine, theirs cuda.DevicePtr) {
	t.Helper()
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	mine, theirs = alloc(t, h, n, s), alloc(t, h, n, a)
	must(t, "synchronize the context", dev.Synchronize()) // the heap's check of s, run
	f.Hold(true)
	for _, p := range []cuda.DevicePtr{mine, theirs} {
		must(t, "MemsetAsync on s", h.MemsetAsync(pcuda.DevicePtr(p), 0xAB, int(n), pcuda.Stream(s)))
		must(t, "FreeAsync on s", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	}
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(s))
	if f.Pending() == 0 {
		t.Fatal("the memsets ran before ForgetStream: the test holds nothing")
	}
	return s, mine, theirs
}

// TestFakeForgetDestroyedStream: ForgetStream of a stream the user destroyed first, with a free
// of another stream's block deferred on it and its own heap holding a block freed behind a memset
// still queued there. The driver refuses the handle, so no synchronize of the stream can wait
// for that work: ForgetStream synchronizes the context instead (as a poll and Close answer a
// refused stream), once, which runs the memsets, then does the deferred free, gives back the
// memory of s's heap and forgets s. Before, it returned the refusal and kept s for good: its
// free stayed deferred, its heap kept its memory, and every later ForgetStream(s) failed the
// same way. The blocks taken back are then allocated on a and written: their bytes must survive
// (the memsets ran before, not after).
func TestFakeForgetDestroyedStream(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a := newStream(t, dev, h)
	const n = 64 << 10
	s, mine, theirs := destroyedWithFrees(t, f, dev, h, a, n)
	syncs := f.Stat(fakecuda.CtxSyncs)
	if err := h.ForgetStream(pcuda.Stream(s)); err != nil {
		t.Fatalf("ForgetStream of a destroyed stream: %v; want nil (the context synchronized instead)", err)
	}
	if n := f.Stat(fakecuda.CtxSyncs) - syncs; n != 1 {
		t.Errorf("ForgetStream of a destroyed stream synchronized the context %d times, want once", n)
	}
	if f.Pending() != 0 {
		t.Errorf("ForgetStream gave s's memory back with work of %d streams still queued", f.Pending())
	}
	h.mu.Lock()
	_, kept := h.streams[pcuda.Stream(s)]
	list := h.lists.Lookup(uintptr(s))
	h.mu.Unlock()
	if st := h.Stats(); st.Deferred != 0 || st.Live != 0 || kept || list != nil {
		t.Fatalf("after ForgetStream: %d deferred, %d live, s's heap kept %v, s's list %v; want none of them", st.Deferred, st.Live, kept, list != nil)
	}
	must(t, "ForgetStream again", h.ForgetStream(pcuda.Stream(s)))
	// Both blocks are the arena's or a's now: a's Allocs take them, and a's writes must stay.
	want := pattern(n, 0x5C)
	var got []cuda.DevicePtr
	reused := 0
	for range 2 {
		p := alloc(t, h, n, a)
		if p == mine || p == theirs {
			reused++
		}
		must(t, "HtoDAsync on a", h.HtoDAsync(pcuda.DevicePtr(p), want, pcuda.Stream(a)))
		got = append(got, p)
	}
	if reused == 0 {
		t.Errorf("a's Allocs got %#x, not the blocks s gave back (%#x, %#x)", got, mine, theirs)
	}
	f.Hold(false)
	must(t, "synchronize the context", dev.Synchronize())
	buf := make([]byte, n)
	for _, p := range got {
		must(t, "DtoH", h.DtoH(buf, pcuda.DevicePtr(p)))
		if !bytes.Equal(buf, want) {
			i := firstDiff(buf, want)
			t.Errorf("block %#x holds %#x at byte %d, want %#x: the destroyed stream's memset ran after the reuse", p, buf[i], i, want[i])
		}
	}
	freeAll(t, h, got)
}

// TestFakeForgetDestroyedStreamBesideCapture: ForgetStream of a destroyed stream (as in
// TestFakeForgetDestroyedStream) while the user captures a CUDA graph on another stream of the
// heap's: the synchronize of the context that would answer the refused stream is refused during
// a capture, and would end it; so ForgetStream asks nothing of the context, leaves the capture
// valid, keeps s's free deferred and its heap's memory, parked apart from s's handle (which the
// driver may give to a new stream: park_test.go), and says so with an error matching
// cuda.ErrCapturing. Once the capture has ended, ForgetStream(s) releases them.
func TestFakeForgetDestroyedStreamBesideCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	const n = 64 << 10
	s, _, _ := destroyedWithFrees(t, f, dev, h, a, n)
	var kept bool
	var deferred int
	err := forgetDuringCapture(t, dev, h, c, s, func() {
		h.mu.Lock() // no Stats: its poll would answer s, refused, once the capture has ended
		_, under := h.streams[pcuda.Stream(s)]
		kept = !under && h.lists.Lookup(uintptr(s)) == nil && h.parkedAs(pcuda.Stream(s)) && h.parkedHeaps() == 1
		deferred = len(h.deferred)
		h.mu.Unlock()
	})
	t.Logf("ForgetStream during the capture: %v", err)
	if deferred != 1 || !kept {
		t.Fatalf("ForgetStream refused during a capture: %d deferred, s's list and heap parked apart from its handle %v; want 1, true (nothing changes owner)", deferred, kept)
	}
	must(t, "ForgetStream once the capture has ended", h.ForgetStream(pcuda.Stream(s)))
	if st := h.Stats(); st.Deferred != 0 || st.Live != 1 {
		t.Fatalf("after ForgetStream: %d deferred, %d live; want 0, 1", st.Deferred, st.Live)
	}
	freeAll(t, h, []cuda.DevicePtr{keep})
}

// TestFakeForgetDestroyedStreamAfterFault: ForgetStream of a destroyed stream (as in
// TestFakeForgetDestroyedStream) after a kernel faulted: the synchronize of the context that
// would answer the refused stream fails with the context's sticky error, so ForgetStream keeps s
// (its free deferred, its heap's memory) and says that the device failed (device.ErrDeviceFault,
// of kind pinmalloc.ErrDeviceFault, the driver's CUDA_ERROR_ILLEGAL_ADDRESS said once), not
// that the stream is invalid. Once the fault is cleared (the fake's, for the test to go on),
// ForgetStream(s) forgets s.
func TestFakeForgetDestroyedStreamAfterFault(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a := newStream(t, dev, h)
	s, _, _ := destroyedWithFrees(t, f, dev, h, a, 64<<10)
	f.Fault(t, dev)
	err := h.ForgetStream(pcuda.Stream(s))
	if !errors.Is(err, ErrDeviceFault) || !errors.Is(err, pinmalloc.ErrDeviceFault) || errors.Is(err, ErrInvalidStream) {
		t.Errorf("ForgetStream of a destroyed stream after a fault: %v; want device.ErrDeviceFault", err)
	}
	if code, _ := pcuda.ResultCode(err); code != fakecuda.ResultIllegalAddress || strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS") != 1 {
		t.Errorf("ForgetStream after a fault: %v; want the driver's CUDA_ERROR_ILLEGAL_ADDRESS in the chain, said once", err)
	}
	t.Logf("ForgetStream after a fault: %v", err)
	h.mu.Lock()
	_, kept := h.streams[pcuda.Stream(s)]
	deferred := len(h.deferred)
	h.mu.Unlock()
	if deferred != 1 || !kept {
		t.Fatalf("ForgetStream after a fault: %d deferred, s's heap kept %v; want 1, true (nothing changes owner)", deferred, kept)
	}
	f.ClearStickyError()
	must(t, "ForgetStream once the fault is cleared", h.ForgetStream(pcuda.Stream(s)))
	if st := h.Stats(); st.Deferred != 0 || st.Live != 0 {
		t.Fatalf("after ForgetStream: %d deferred, %d live; want none", st.Deferred, st.Live)
	}
}

// TestFakeFreeAsyncRacingForgetStream: a ForgetStream(s) called while a FreeAsync on s is
// between its look at s's list and its push there (stopped in the driver by its ZeroOnFree
// memset's capture check) must come wholly after the push: it waits for s and does the free,
// and leaves no list for s. pinned had that window (a push following a forgotten stream's gone
// list to a new list for the handle, which kept the old stream's "non-blocking?" answer for the
// next stream given it); the heap's mutex covers the whole FreeAsync and ForgetStream, so the
// window is closed here, and this test keeps it so. The driver then gives s's handle to a new
// blocking stream b: a block freed on b behind a memset on the legacy stream (held) must not be
// handed out before the memset has run, which a list left with s's answer would do.
func TestFakeFreeAsyncRacingForgetStream(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, ZeroOnFree: true, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	must(t, "MemsetAsync on s", h.MemsetAsync(pcuda.DevicePtr(p), 1, n, pcuda.Stream(s))) // s's list, checked
	must(t, "synchronize the context", dev.Synchronize())
	if !f.PauseNextCall() {
		t.Fatal("PauseNextCall: a pause is armed already")
	}
	freed, forgot := make(chan error, 1), make(chan error, 1)
	go func() { freed <- h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)) }()
	for deadline := time.Now().Add(10 * time.Second); !f.Paused(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			f.ResumeCall()
			t.Fatal("FreeAsync made no driver call between its look at s's list and its push")
		}
	}
	if h.mu.TryLock() {
		h.mu.Unlock()
		f.ResumeCall()
		t.Fatal("FreeAsync's window between s's list and its push is open to ForgetStream: the heap's mutex is free")
	}
	go func() { forgot <- h.ForgetStream(pcuda.Stream(s)) }()
	f.ResumeCall()
	must(t, "FreeAsync", <-freed)
	must(t, "ForgetStream", <-forgot)
	if len(h.deferred) != 0 || h.lists.Lookup(uintptr(s)) != nil || !h.lists.Forgotten(uintptr(s)) {
		t.Fatalf("after ForgetStream: %d frees deferred, a list for s %v, s forgotten %v; want 0, false, true",
			len(h.deferred), h.lists.Lookup(uintptr(s)) != nil, h.lists.Forgotten(uintptr(s)))
	}
	must(t, "StreamDestroy", dev.StreamDestroy(s))
	b := newBlockingStream(t, dev, h)
	if b != s {
		t.Fatalf("the driver gave the new stream %#x, not s's handle %#x: the test proves nothing", b, s)
	}
	q := alloc(t, h, n, a)
	f.Hold(true)
	must(t, "MemsetAsync on the legacy stream", h.MemsetAsync(pcuda.DevicePtr(q), 0xAB, n, 0))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(b)))
	r := alloc(t, h, n, a) // its poll finds b with nothing of its own run
	want := pattern(n, 0x5C)
	must(t, "HtoDAsync on a", h.HtoDAsync(pcuda.DevicePtr(r), want, pcuda.Stream(a)))
	must(t, "synchronize a", dev.StreamSynchronize(a))
	f.Hold(false)
	f.Complete()
	must(t, "synchronize the context", dev.Synchronize())
	buf := make([]byte, n)
	must(t, "DtoH", h.DtoH(buf, pcuda.DevicePtr(r)))
	if r == q || !bytes.Equal(buf, want) {
		t.Errorf("a's Alloc got %s, and its bytes are %s", same(r == q), intact(bytes.Equal(buf, want)))
	}
	must(t, "Sync", h.Sync())
	freeAll(t, h, []cuda.DevicePtr{r})
}
