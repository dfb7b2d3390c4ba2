package device

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeParkedStreamHandleReuse: ForgetStream of a stream s the user destroyed first, refused
// while another stream captures a CUDA graph (the synchronize of the context that would wait for
// s's work would end the capture), then a new blocking stream b, which the driver gives s's
// handle. s was non-blocking (its list has asked the driver so, at a poll), and its heap holds a
// block freed on s behind a memset still queued on s. b must start with nothing of s's:
//
//   - an Alloc on b must not get the block s freed: s's memset still runs on it, and b's work is
//     not ordered after s's;
//   - a free on b, a blocking stream, must wait for the legacy stream's earlier work: a block
//     cleared by a memset on the legacy stream (held) and freed on b must not be handed out to
//     another stream before that memset has run.
//
// Before the heap parked a refused destroyed stream's list and heap apart from its handle, b took
// s's heap (the Alloc got s's block, which s's memset then overwrote) and s's list, with s's
// "non-blocking" answer (the free on b came back at once, b idle, and the legacy memset then
// overwrote the block's next owner's bytes). Both bytes checks fail then.
func TestFakeParkedStreamHandleReuse(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c) // c has a heap: the heap sees its capture
	const n = 64 << 10
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	mine := alloc(t, h, n, s)
	p0 := alloc(t, h, n, a)
	must(t, "FreeAsync on s", h.FreeAsync(pcuda.DevicePtr(p0), pcuda.Stream(s)))
	if st := h.Stats(); st.Deferred != 0 { // the poll asks s's list "non-blocking?": yes
		t.Fatalf("Stats with s idle left %d frees deferred; want 0", st.Deferred)
	}
	f.Hold(true)
	must(t, "MemsetAsync on s", h.MemsetAsync(pcuda.DevicePtr(mine), 0xAB, n, pcuda.Stream(s)))
	must(t, "FreeAsync on s", h.FreeAsync(pcuda.DevicePtr(mine), pcuda.Stream(s))) // to s's heap
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(s))

	forgetDuringCapture(t, dev, h, c, s, nil)
	if f.Pending() == 0 {
		t.Fatal("s's memset ran: the test holds nothing")
	}

	b := newBlockingStream(t, dev, h)
	if b != s {
		t.Fatalf("the driver gave the new stream %#x, not s's handle %#x: the test proves nothing", b, s)
	}
	pb := alloc(t, h, n, b)
	q := alloc(t, h, n, a)
	must(t, "MemsetAsync on the legacy stream", h.MemsetAsync(pcuda.DevicePtr(q), 0xCD, n, 0))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(b)))
	r := alloc(t, h, n, a) // its poll asks b's list whether b has passed the free
	want := pattern(n, 0x5C)
	must(t, "HtoDAsync on a", h.HtoDAsync(pcuda.DevicePtr(r), want, pcuda.Stream(a)))
	must(t, "HtoDAsync on b", h.HtoDAsync(pcuda.DevicePtr(pb), want, pcuda.Stream(b)))
	// In the order that shows a reuse: a's copy, then b's work (after the legacy memset, b being
	// blocking), then the rest: s's memset.
	must(t, "synchronize a", dev.StreamSynchronize(a))
	must(t, "synchronize b", dev.StreamSynchronize(b))
	f.Hold(false)
	f.Complete()
	must(t, "synchronize the context", dev.Synchronize())
	buf := make([]byte, n)
	must(t, "DtoH", h.DtoH(buf, pcuda.DevicePtr(pb)))
	if pb == mine || !bytes.Equal(buf, want) {
		t.Errorf("b's Alloc got %s, and its bytes are %s", pick(pb == mine, "the block s freed behind its memset, still queued", "another block"),
			intactBy(bytes.Equal(buf, want), "s's memset"))
	}
	must(t, "DtoH", h.DtoH(buf, pcuda.DevicePtr(r)))
	if r == q || !bytes.Equal(buf, want) {
		t.Errorf("a's Alloc got %s, and its bytes are %s", pick(r == q, "the block freed on b behind the legacy stream's memset, still queued", "another block"),
			intactBy(bytes.Equal(buf, want), "the legacy stream's memset"))
	}
	must(t, "Sync", h.Sync())
	freeAll(t, h, []cuda.DevicePtr{keep, pb, r})
}

func pick(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func intactBy(b bool, by string) string {
	if b {
		return "intact"
	}
	return "overwritten by " + by
}

// parkDestroyed makes a stream s the heap sees, destroyed without ForgetStream with work held
// there (as destroyedWithFrees: a block of s's heap and one of a's, each cleared by a memset
// queued on s and freed on s; with liveOnS, also a block allocated on s and left live, returned),
// and begins a capture on c (the caller ends it, endCapture; the test's cleanup too), during
// which ForgetStream(s) is refused with an error matching cuda.ErrCapturing and parks s. It
// checks that s's list and heap are no longer under s's handle, and that Stats counts them still.
func parkDestroyed(t *testing.T, f *fakecuda.Driver, dev *cuda.Device, h *Heap, a, c cuda.Stream, n uintptr, liveOnS bool) (s cuda.Stream, live cuda.DevicePtr, endCapture func()) {
	t.Helper()
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	mine, theirs := alloc(t, h, n, s), alloc(t, h, n, a)
	if liveOnS {
		live = alloc(t, h, 4096, s)
	}
	must(t, "synchronize the context", dev.Synchronize()) // the heap's check of s, run
	f.Hold(true)
	for _, p := range []cuda.DevicePtr{mine, theirs} {
		must(t, "MemsetAsync on s", h.MemsetAsync(pcuda.DevicePtr(p), 0xAB, int(n), pcuda.Stream(s)))
		must(t, "FreeAsync on s", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	}
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(s))
	h.mu.Lock() // no Stats: its poll would answer s, refused, with a synchronize of the context
	liveBefore, _, _ := h.live()
	streamsBefore := len(h.streams)
	h.mu.Unlock()
	runtime.LockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	ended := false
	endCapture = func() {
		t.Helper()
		if ended {
			return
		}
		ended = true
		g, err := dev.StreamEndCapture(c)
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatalf("the heap invalidated the user's capture: %v", err)
		}
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}
	t.Cleanup(endCapture)
	if err := h.ForgetStream(pcuda.Stream(s)); !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("ForgetStream of a destroyed stream during a capture: %v; want an error matching cuda.ErrCapturing", err)
	}
	h.mu.Lock()
	_, under := h.streams[pcuda.Stream(s)]
	list := h.lists.Lookup(uintptr(s))
	parked := h.parkedAs(pcuda.Stream(s))
	h.mu.Unlock()
	if under || list != nil || !parked {
		t.Fatalf("after the refused ForgetStream: s's heap under its handle %v, s's list %v, s parked %v; want false, false, true", under, list != nil, parked)
	}
	if d := h.DeferredByStream(); len(d) != 1 || d[0].Stream != pcuda.Stream(s) || d[0].Blocks != 1 || !d[0].Parked {
		t.Errorf("parked: DeferredByStream %+v; want s's one free, parked under its handle %#x", d, s)
	}
	if st := h.Stats(); st.Deferred != 1 || st.Live != liveBefore || st.Streams != streamsBefore || f.Pending() == 0 {
		t.Fatalf("parked: %d deferred, %d live, %d streams, %d streams with work; want 1, %d, %d, work held (nothing changes owner, nothing is lost)",
			st.Deferred, st.Live, st.Streams, f.Pending(), liveBefore, streamsBefore)
	}
	return s, live, endCapture
}

// TestFakeParkedStreamReleasedAtSync, ...AtTrim and ...AtForgetStream: a parked stream
// (parkDestroyed) keeps its deferred free and its heap's memory while the capture lasts, through
// a Sync, a Trim and a ForgetStream of its handle, each refused with an error matching
// cuda.ErrCapturing, the capture left valid; once the capture has ended, the first call that
// synchronizes the context (each test one of them) gives everything back: no free deferred, one
// stream heap fewer, fewer chunks in use, and no parked stream left. The destroyed stream's
// memsets have run by then.
func TestFakeParkedStreamReleasedAtSync(t *testing.T) {
	testParkedReleased(t, func(h *Heap, _ cuda.Stream) error { return h.Sync() })
}

func TestFakeParkedStreamReleasedAtTrim(t *testing.T) {
	testParkedReleased(t, func(h *Heap, _ cuda.Stream) error { return h.Trim() })
}

func TestFakeParkedStreamReleasedAtForgetStream(t *testing.T) {
	testParkedReleased(t, func(h *Heap, s cuda.Stream) error { return h.ForgetStream(pcuda.Stream(s)) })
}

func testParkedReleased(t *testing.T, call func(h *Heap, s cuda.Stream) error) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	s, _, endCapture := parkDestroyed(t, f, dev, h, a, c, 64<<10, false)
	parked := h.Stats()
	for _, w := range []struct {
		name string
		call func() error
	}{
		{"Sync", h.Sync}, {"Trim", h.Trim}, {"ForgetStream", func() error { return h.ForgetStream(pcuda.Stream(s)) }},
	} {
		err := w.call()
		if !errors.Is(err, pcuda.ErrCapturing) {
			t.Errorf("%s during the capture: %v; want an error matching cuda.ErrCapturing", w.name, err)
		}
		saysDeviceOnce(t, w.name+" during the capture", err)
	}
	if st := h.Stats(); st.Deferred != parked.Deferred || st.Streams != parked.Streams || f.Pending() == 0 {
		t.Fatalf("during the capture: %d deferred, %d streams, %d streams with work; want %d, %d, work held (nothing released)",
			st.Deferred, st.Streams, f.Pending(), parked.Deferred, parked.Streams)
	}
	endCapture()
	must(t, "the call after the capture", call(h, s))
	if f.Pending() != 0 {
		t.Errorf("the parked stream was released with work of %d streams queued", f.Pending())
	}
	st := h.Stats()
	h.mu.Lock()
	left := len(h.parked)
	h.mu.Unlock()
	if st.Deferred != 0 || st.Streams != parked.Streams-1 || st.Live != 1 || left != 0 {
		t.Fatalf("after the capture: %d deferred, %d streams, %d live, %d parked; want 0, %d, 1, 0", st.Deferred, st.Streams, st.Live, left, parked.Streams-1)
	}
	if st.Arena.ChunksInUse >= parked.Arena.ChunksInUse {
		t.Errorf("the arena has %d chunks in use, %d while parked: the parked heap's memory is not back", st.Arena.ChunksInUse, parked.Arena.ChunksInUse)
	}
	freeAll(t, h, []cuda.DevicePtr{keep})
}

// TestFakeParkedStreamClose: Close of a heap with a parked stream (parkDestroyed) refuses with
// ErrBusy during the capture and changes nothing; after it, Close itself synchronizes the context
// for the parked stream and gives everything back: no error, every event destroyed, and nothing
// left in the fake driver (runHeap's cleanup checks).
func TestFakeParkedStreamClose(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	_, _, endCapture := parkDestroyed(t, f, dev, h, a, c, 64<<10, false)
	freeAll(t, h, []cuda.DevicePtr{keep})
	if err := h.Close(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Close during the capture: %v; want ErrBusy", err)
	}
	if st := h.Stats(); st.Deferred != 1 || f.Pending() == 0 {
		t.Fatalf("after Close during the capture: %d deferred, %d streams with work; want 1, work held", st.Deferred, f.Pending())
	}
	endCapture()
	must(t, "Close", h.Close())
	if f.Pending() != 0 {
		t.Errorf("Close gave the parked stream's memory back with work of %d streams queued", f.Pending())
	}
	if st := h.Stats(); st.Events != 0 {
		t.Errorf("%d events left after Close", st.Events)
	}
}

// TestFakeParkedHeapWithLiveBlock: a parked stream whose heap still has a live block (allocated
// on s before the user destroyed it): after the capture, Close counts that block
// (heap.ErrLiveBlocks); a Trim gives back the parked stream's deferred free and its heap's free
// memory and keeps the heap for its live block, for which ForgetStream(s) fails with
// heap.ErrLiveBlocks too; once the block is freed, ForgetStream(s) gives the heap back, Close
// succeeds, and nothing is left in the fake driver (runHeap's cleanup checks).
func TestFakeParkedHeapWithLiveBlock(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	s, live, endCapture := parkDestroyed(t, f, dev, h, a, c, 64<<10, true)
	endCapture()
	freeAll(t, h, []cuda.DevicePtr{keep})
	if err := h.Close(); !errors.Is(err, heap.ErrLiveBlocks) {
		t.Fatalf("Close with a live block of the parked heap: %v; want heap.ErrLiveBlocks", err)
	}
	must(t, "Trim", h.Trim())
	h.mu.Lock()
	kept := len(h.parked) == 1 && h.parked[0].sh != nil && h.parked[0].list == nil
	h.mu.Unlock()
	if st := h.Stats(); st.Deferred != 0 || st.Live != 1 || !kept || f.Pending() != 0 {
		t.Fatalf("after Trim: %d deferred, %d live, the parked heap kept for its live block %v, %d streams with work; want 0, 1, true, 0",
			st.Deferred, st.Live, kept, f.Pending())
	}
	must(t, "Verify", h.Verify())
	if err := h.ForgetStream(pcuda.Stream(s)); !errors.Is(err, heap.ErrLiveBlocks) {
		t.Fatalf("ForgetStream of the parked stream with a live block: %v; want heap.ErrLiveBlocks", err)
	}
	freeAll(t, h, []cuda.DevicePtr{live})
	must(t, "ForgetStream once the block is freed", h.ForgetStream(pcuda.Stream(s)))
	h.mu.Lock()
	left := len(h.parked)
	h.mu.Unlock()
	if st := h.Stats(); left != 0 || st.Streams != 2 {
		t.Fatalf("after ForgetStream: %d parked, %d streams; want 0, 2 (a's and c's)", left, st.Streams)
	}
	must(t, "Close", h.Close())
}

// TestFakeForgetNewStreamOnParkedHandle: after a parked stream s (parkDestroyed), the driver gives
// s's handle to a new stream b. ForgetStream of that handle is about b, the stream it names now: it
// waits for b (alive: no synchronize of the context needed) and forgets it, and succeeds while the
// capture lasts, leaving the parked stream as it is (its free deferred, its heap counted); once
// the capture has ended, ForgetStream of the handle again (b forgotten, nothing of b's left)
// releases the parked stream.
func TestFakeForgetNewStreamOnParkedHandle(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	const n = 64 << 10
	s, _, endCapture := parkDestroyed(t, f, dev, h, a, c, n, false)
	parked := h.Stats()
	b := newBlockingStream(t, dev, h)
	if b != s {
		t.Fatalf("the driver gave the new stream %#x, not s's handle %#x: the test proves nothing", b, s)
	}
	p := alloc(t, h, n, b)
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	must(t, "ForgetStream of b during the capture", h.ForgetStream(pcuda.Stream(b)))
	h.mu.Lock()
	_, under := h.streams[pcuda.Stream(b)]
	list := h.lists.Lookup(uintptr(b))
	stillParked := h.parkedAs(pcuda.Stream(s))
	h.mu.Unlock()
	if st := h.Stats(); under || list != nil || !stillParked || st.Deferred != 1 || st.Streams != parked.Streams || f.Pending() == 0 {
		t.Fatalf("after ForgetStream of b: b's heap %v, b's list %v, s parked %v, %d deferred, %d streams, %d streams with work; want false, false, true, 1, %d, work held",
			under, list != nil, stillParked, st.Deferred, st.Streams, f.Pending(), parked.Streams)
	}
	endCapture()
	must(t, "ForgetStream of the handle after the capture", h.ForgetStream(pcuda.Stream(s)))
	h.mu.Lock()
	left := len(h.parked)
	h.mu.Unlock()
	if st := h.Stats(); left != 0 || st.Deferred != 0 || st.Streams != parked.Streams-1 || f.Pending() != 0 {
		t.Fatalf("after the capture: %d parked, %d deferred, %d streams, %d streams with work; want 0, 0, %d, 0", left, st.Deferred, st.Streams, f.Pending(), parked.Streams-1)
	}
	must(t, "Verify", h.Verify())
	freeAll(t, h, []cuda.DevicePtr{keep})
}

// duringCapture runs during while stream c captures a CUDA graph (GLOBAL mode, the calling
// goroutine's thread locked), and checks that the capture survived what (the calls during
// makes).
func duringCapture(t *testing.T, dev *cuda.Device, c cuda.Stream, what string, during func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	during()
	g, err := dev.StreamEndCapture(c)
	if err != nil {
		t.Fatalf("%s invalidated the user's capture: %v", what, err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
}

// forgetDuringCapture calls ForgetStream(s) while stream c captures a CUDA graph, runs during
// (if not nil) before the capture ends, and checks that the capture survived and that
// ForgetStream was refused with an error matching cuda.ErrCapturing, which it returns.
func forgetDuringCapture(t *testing.T, dev *cuda.Device, h *Heap, c, s cuda.Stream, during func()) error {
	t.Helper()
	var err error
	duringCapture(t, dev, c, "ForgetStream", func() {
		err = h.ForgetStream(pcuda.Stream(s))
		if during != nil {
			during()
		}
	})
	if !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("ForgetStream of a destroyed stream during a capture: %v; want an error matching cuda.ErrCapturing", err)
	}
	return err
}
