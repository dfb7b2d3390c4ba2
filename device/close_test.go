package device

import (
	"errors"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeCloseAfterContextSynchronize: a heap whose user freed blocks of stream a's heap on
// the legacy default stream (and on blocking stream b), then synchronized the whole context,
// has nothing in flight: Close must succeed the first time. The legacy stream is never found
// idle by a query, so Close gives its frees a point, an event it records itself; with the
// fake's queries held (a GPU that has not reached the event yet, as for a few microseconds on
// a real one) that event is not passed when Close looks. Before, Close said ErrBusy, and a
// second Close succeeded.
func TestFakeCloseAfterContextSynchronize(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	b := newBlockingStream(t, dev, h)
	p, q := alloc(t, h, 4096, a), alloc(t, h, 4096, a)
	must(t, "MemsetAsync on the legacy stream", h.MemsetAsync(pcuda.DevicePtr(p), 1, 4096, 0))
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(q), 2, 4096, pcuda.Stream(b)))
	must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(p), 0))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(b)))
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	defer f.Hold(false)
	closeClean(t, f, dev, h, "after the context's synchronize, every free done by the device")
}

// closeClean closes h, which has nothing of the user's in flight, with the fake's queries held
// (what): Close must succeed the first time, and leave no event in the driver.
func closeClean(t *testing.T, f *fakecuda.Driver, dev *cuda.Device, h *Heap, what string) {
	t.Helper()
	if err := h.Close(); err != nil {
		t.Fatalf("Close %s: %v", what, err)
	}
	f.Hold(false)
	must(t, "synchronize the context after Close", dev.Synchronize())
	if n := f.Stat(fakecuda.Events); n != 0 {
		t.Errorf("%d events left in the driver", n)
	}
}

// TestFakeCloseBusyWithWorkInFlight: Close says ErrBusy, and waits for nothing, while the
// user's own work that a free on the legacy stream is ordered after is still queued: a memset
// on a blocking stream the heap has seen, or on the legacy stream itself. The fake runs held
// work at any synchronize, so a Close that waited for a point it recorded would run the memset
// and succeed; it must leave it queued.
func TestFakeCloseBusyWithWorkInFlight(t *testing.T) { closeBusyWithWorkInFlight(t, false) }

// TestFakeCloseBusyWithLegacyWorkInFlight is TestFakeCloseBusyWithWorkInFlight with the memset
// on the legacy stream.
func TestFakeCloseBusyWithLegacyWorkInFlight(t *testing.T) { closeBusyWithWorkInFlight(t, true) }

func closeBusyWithWorkInFlight(t *testing.T, onLegacy bool) {
	name := "a memset on blocking stream b"
	if onLegacy {
		name = "a memset on the legacy stream"
	}
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	b := newBlockingStream(t, dev, h)
	p := alloc(t, h, 4096, a)
	must(t, "Free of a block of b (b seen)", h.Free(pcuda.DevicePtr(alloc(t, h, 4096, b))))
	work := b
	if onLegacy {
		work = 0
	}
	// Run what is queued so far, so that only the user's work is in flight below.
	must(t, "MemsetAsync on the legacy stream", h.MemsetAsync(pcuda.DevicePtr(p), 0, 4096, 0))
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	// The user's own work, queued directly: the heap knows only the stream.
	must(t, "memset", dev.MemsetD8Async(p, 0xAB, 4096, work))
	must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(p), 0))
	if err := h.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with %s queued: %v, want ErrBusy", name, err)
	}
	if n := f.Pending(); n == 0 {
		t.Errorf("Close ran the memset (it waited for the user's work)")
	}
	f.Hold(false)
	must(t, "synchronize the context", dev.Synchronize())
}

// TestFakeCloseWaitsForUnseenBlockingStream: a block of the legacy stream's heap, written by a
// memset on a blocking stream the heap never saw and then freed on the legacy stream (its own:
// the free is immediate, and later legacy-stream work runs after the memset), must not be
// unmapped by Close under the memset. Before, Close found the legacy stream idle by its own
// query (its work is none: the memset is on the other stream), released the arena, and the
// memset faulted when it ran (CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronize). The same
// with the block of a's heap freed on the legacy stream (a deferred free).
func TestFakeCloseWaitsForUnseenBlockingStream(t *testing.T) { closeWaitsForUnseen(t, false) }

// TestFakeCloseWaitsForUnseenBlockingStreamDeferred is TestFakeCloseWaitsForUnseenBlockingStream
// with a deferred free.
func TestFakeCloseWaitsForUnseenBlockingStreamDeferred(t *testing.T) {
	closeWaitsForUnseen(t, true)
}

func closeWaitsForUnseen(t *testing.T, deferred bool) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	var p cuda.DevicePtr
	if deferred {
		a := newStream(t, dev, h)
		p = alloc(t, h, 64<<10, a)
		// The block used on the legacy stream: the heap checks the stream there.
		must(t, "MemsetAsync on the legacy stream", h.MemsetAsync(pcuda.DevicePtr(p), 0, 64<<10, 0))
	} else {
		p = alloc(t, h, 64<<10, 0)
	}
	x, err := dev.StreamCreate(false) // blocking, the user's, never given to the heap
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(x)) }()
	must(t, "synchronize the context", dev.Synchronize()) // the heap's checks of its streams, run
	f.Hold(true)
	must(t, "memset on x", dev.MemsetD8Async(p, 0xAB, 64<<10, x))
	must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(p), 0))
	closeErr := h.Close()
	f.Hold(false)
	syncErr := dev.Synchronize()
	if closeErr != nil || syncErr != nil {
		t.Errorf("Close: %v (want nil, after the memset); the context's synchronize after it: %v (a fault: the memset ran on memory Close gave back)", closeErr, syncErr)
	}
}

// TestFakeCloseAfterFirstUseOfLegacyStream: a heap that meets the legacy stream for the first
// time after the user's last synchronize (a block of stream a's heap freed there), with nothing
// in flight, closes the first time. Before, the heap checked the stream with the driver by
// recording a point in it, which stayed in flight where Close then asked whether the legacy
// stream had work (under the fake's Hold; for microseconds on a GPU): ErrBusy.
func TestFakeCloseAfterFirstUseOfLegacyStream(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	p := alloc(t, h, 4096, a)
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	defer f.Hold(false)
	must(t, "FreeAsync on the legacy stream, its first use", h.FreeAsync(pcuda.DevicePtr(p), 0))
	if err := h.Close(); err != nil {
		t.Fatalf("Close with nothing in flight: %v", err)
	}
}

// TestFakeCloseAfterPollOfLegacyFrees: a heap whose user freed blocks of stream a's heap on
// the legacy default stream and on blocking stream b, synchronized the context, and then
// called Stats (which polls the deferred frees: b's come back, found idle, and the legacy
// stream's get a point there, in flight under the fake's held queries as on a GPU that has
// not reached it yet) has nothing in flight: Close must succeed the first time. Before, Close
// found the legacy stream running its own point and said ErrBusy.
func TestFakeCloseAfterPollOfLegacyFrees(t *testing.T) { closeAfterPoll(t, "Stats") }

// TestFakeCloseAfterAllocPollOfLegacyFrees is TestFakeCloseAfterPollOfLegacyFrees with an
// Alloc (and its Free) for the poll.
func TestFakeCloseAfterAllocPollOfLegacyFrees(t *testing.T) { closeAfterPoll(t, "Alloc") }

// TestFakeCloseAfterPollBehindLegacyPoint is TestFakeCloseAfterPollOfLegacyFrees with b's free
// made after the first Stats and polled by a second: b's own work has all run, but the legacy
// stream's point is still in flight, which b's frees wait for, so the poll gives them a point
// in b, behind it. Close waits for both. Before, it said ErrBusy on stream b.
func TestFakeCloseAfterPollBehindLegacyPoint(t *testing.T) { closeAfterPoll(t, "Stats twice") }

func closeAfterPoll(t *testing.T, poll string) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	b := newBlockingStream(t, dev, h)
	p, q := alloc(t, h, 4096, a), alloc(t, h, 4096, a)
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(q), 2, 4096, pcuda.Stream(b)))
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	defer f.Hold(false)
	must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(p), 0))
	switch poll {
	case "Alloc":
		must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(b)))
		r, err := h.Alloc(4096, pcuda.Stream(a))
		must(t, "Alloc", err)
		must(t, "Free", h.Free(r))
	case "Stats":
		must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(b)))
		h.Stats()
	case "Stats twice":
		h.Stats()
		must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(b)))
		if st := h.Stats(); st.Deferred != 2 {
			t.Fatalf("%d frees deferred after the second Stats, want 2 (b's waits for the legacy stream's point)", st.Deferred)
		}
	}
	if n := f.Pending(); n == 0 {
		t.Fatalf("%s recorded no point in the legacy stream: the test tests nothing", poll)
	}
	closeClean(t, f, dev, h, "after "+poll+", with only the heap's own points in flight")
}

// TestFakeCloseBusyWithLegacyWorkAfterPoll: Close waits for the point a poll recorded in the
// legacy stream after the user's last wait, and for nothing queued after it: with the user's
// own memset on the legacy stream queued after Stats (and a block freed there after it), it
// says ErrBusy and leaves the memset queued (the fake runs no more than a wait needs); once it
// has run, Close succeeds.
func TestFakeCloseBusyWithLegacyWorkAfterPoll(t *testing.T) { closeBusyAroundPoll(t, false) }

// TestFakeCloseBusyWithLegacyWorkBeforePoll is TestFakeCloseBusyWithLegacyWorkAfterPoll with
// the memset queued before Stats: the poll's point comes after the user's work, and Close
// waits for no such point.
func TestFakeCloseBusyWithLegacyWorkBeforePoll(t *testing.T) { closeBusyAroundPoll(t, true) }

func closeBusyAroundPoll(t *testing.T, before bool) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	p, q := alloc(t, h, 4096, a), alloc(t, h, 4096, a)
	must(t, "synchronize the context", dev.Synchronize())
	f.Hold(true)
	defer f.Hold(false)
	must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(p), 0))
	memset := func() { must(t, "memset on the legacy stream", dev.MemsetD8Async(q, 0xAB, 4096, 0)) }
	if before {
		memset()
	}
	h.Stats() // a point for the free, in the legacy stream
	if !before {
		memset()
	}
	must(t, "FreeAsync on the legacy stream after the memset", h.FreeAsync(pcuda.DevicePtr(q), 0))
	if err := h.Close(); !errors.Is(err, ErrBusy) {
		t.Fatalf("Close with a memset queued on the legacy stream (before the heap's point: %v): %v, want ErrBusy", before, err)
	}
	if n := f.Pending(); n == 0 {
		t.Fatalf("Close ran the memset (it waited for the user's work)")
	}
	must(t, "synchronize the context", dev.Synchronize())
	if err := h.Close(); err != nil {
		t.Fatalf("Close once the memset has run: %v", err)
	}
}

// TestFakeCloseWaitsForDestroyedStream: a block of stream s's heap, written by a memset on s and
// freed on s (its own stream: it goes back to s's heap at once), with s then destroyed without
// ForgetStream and the memset still queued (cuStreamDestroy returns at once, and the driver still
// runs the work; from then on it refuses the handle). Close must not give the memory back under
// the memset: the query of s that the driver refuses says nothing about that work, and only a
// synchronize of the context waits for it. Before, Points.Running took the refusal for an idle
// stream, Close released the arena (cuMemUnmap and cuMemRelease, which do not wait), and the
// memset faulted when it ran (CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronize).
func TestFakeCloseWaitsForDestroyedStream(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	const n = 64 << 10
	p := alloc(t, h, n, s)
	must(t, "synchronize the context", dev.Synchronize()) // the heap's check of s, run
	f.Hold(true)
	defer f.Hold(false)
	must(t, "MemsetAsync on s", h.MemsetAsync(pcuda.DevicePtr(p), 0xAB, n, pcuda.Stream(s)))
	must(t, "FreeAsync on s", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(s))
	if f.Pending() == 0 {
		t.Fatal("the memset ran before Close: the test holds nothing")
	}
	closeErr := h.Close()
	f.Hold(false)
	syncErr := dev.Synchronize()
	if closeErr != nil || syncErr != nil {
		t.Errorf("Close: %v (want nil, after the memset); the context's synchronize after it: %v (a fault: the memset ran on memory Close gave back)", closeErr, syncErr)
	}
}

// TestFakeCloseBesideCopyCapture is TestFakeCloseWaitsForDestroyedStream while the user captures
// a graph on c, a non-blocking stream the heap has seen only through a copy, and whose list has
// left the lists (empty at listLinger polls). Close answered the destroyed stream with a
// synchronize of the context after asking only the streams with a heap or a list, which ended
// the user's capture on c. Now it asks every stream the heap has seen first: it refuses with
// ErrBusy, waiting for nothing, the capture stays valid, and a Close after the capture succeeds.
func TestFakeCloseBesideCopyCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c, d := newStream(t, dev, h), newStream(t, dev, h), newStream(t, dev, h)
	x := alloc(t, h, 4096, a)
	must(t, "MemsetAsync on c", h.MemsetAsync(pcuda.DevicePtr(x), 0, 4096, pcuda.Stream(c)))
	// Polls run while frees are deferred: one on d, held, until c's list, empty, has left.
	f.Hold(true)
	must(t, "MemsetAsync on d", h.MemsetAsync(pcuda.DevicePtr(x), 0, 4096, pcuda.Stream(d)))
	must(t, "FreeAsync on d", h.FreeAsync(pcuda.DevicePtr(x), pcuda.Stream(d)))
	for range listLinger + 1 {
		h.Stats()
	}
	f.Hold(false)
	if st := h.Stats(); st.Deferred != 0 {
		t.Fatalf("d has passed the free: %d deferred, want 0", st.Deferred)
	}
	h.mu.Lock()
	list, heap := h.lists.Lookup(uintptr(c)), h.streams[pcuda.Stream(c)]
	h.mu.Unlock()
	if list != nil || heap != nil {
		t.Fatalf("c has a list %v, a heap %v; want neither", list != nil, heap != nil)
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	must(t, "Free", h.Free(pcuda.DevicePtr(alloc(t, h, 4096, s))))
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(s))
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
		closeErr := h.Close()
		g, err := dev.StreamEndCapture(c)
		if err != nil {
			t.Fatalf("Close (%v) invalidated the user's capture on a stream the heap has seen: %v", closeErr, err)
		}
		must(t, "GraphDestroy", dev.GraphDestroy(g))
		if !errors.Is(closeErr, ErrBusy) || !errors.Is(closeErr, pcuda.ErrCapturing) {
			t.Errorf("Close during the capture = %v, want an error wrapping ErrBusy and cuda.ErrCapturing", closeErr)
		}
	}()
	must(t, "Close after the capture", h.Close())
}
