package device

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeCaptureKeepsDeferredFree: a block of stream a freed on stream b behind a memset
// still queued there, while the user captures a graph on b, whose own heap holds memory too:
// the heap's polls (Stats), Trim and Sync keep the block deferred, leave b's memory alone and
// the capture valid (a query or synchronize of b would invalidate it), Trim and Sync saying
// they could not wait for b (cuda.ErrCapturing); once the capture ends and b has run, the
// block comes back.
func TestFakeCaptureKeepsDeferredFree(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	p := alloc(t, h, 4096, a)
	keep := alloc(t, h, 4096, b)
	f.Hold(true)
	defer f.Complete()
	must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 1, 4096, pcuda.Stream(b)))
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(b, cuda.CaptureGlobal))
	st := h.Stats()
	trimErr, syncErr := h.Trim(), h.Sync()
	g, err := dev.StreamEndCapture(b)
	if err != nil {
		t.Fatalf("the heap invalidated the user's capture: %v", err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	// Neither can wait for b's frees: its work runs when the user launches the graph.
	if !errors.Is(trimErr, pcuda.ErrCapturing) || !errors.Is(syncErr, pcuda.ErrCapturing) {
		t.Errorf("Trim, Sync during the capture = %v, %v; want errors matching cuda.ErrCapturing", trimErr, syncErr)
	}
	if st.Deferred != 1 {
		t.Errorf("a poll during the capture: %d deferred, want 1", st.Deferred)
	}
	f.Hold(false)
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Deferred != 0 {
		t.Errorf("after the capture: %d deferred, want 0", st.Deferred)
	}
	freeAll(t, h, []cuda.DevicePtr{keep})
}

// TestFakeIdlePurgeDuringCapture: a stream heap gone quiet after a burst whose memsets are
// still queued, while the user captures a graph on its stream: the idle purge's ticks (the
// test's own) give nothing back and leave the capture valid (its poll of the stream would
// invalidate it: the request for the quiet heap is asked about there); once the capture has
// ended and the memsets run, the ticks give the memory back (the arena decommits it a purge
// delay later), with no fault.
func TestFakeIdlePurgeDuringCapture(t *testing.T) {
	f, dev, h := purgeHeap(t, false, true)
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	defer f.Complete()
	live, peak := burstIdle(t, f, h, s, 4)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(s, cuda.CaptureGlobal))
	for range 4 {
		h.purgeTick()
	}
	st, committed := h.Stats(), h.Usage().Committed
	g, err := dev.StreamEndCapture(s)
	if err != nil {
		t.Fatalf("the idle purge invalidated the user's capture: %v", err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	if st.Purges != 0 || committed < peak {
		t.Fatalf("during the capture: %d purges, committed %d of %d", st.Purges, committed, peak)
	}
	f.Hold(false)
	if !waitFor(func() bool { h.purgeTick(); return h.Usage().Committed < peak }) {
		t.Errorf("after the capture: %d bytes committed, the burst's %d: nothing given back", h.Usage().Committed, peak)
	}
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	if c := f.StickyError(); c != 0 {
		t.Fatalf("sticky error %d: work ran on memory given back", c)
	}
	freeAll(t, h, live)
}

// TestFakeGoMemoryCopyCaptureRefused: an async copy to or from Go memory on a stream that
// captures a CUDA graph is refused (cuda.ErrCapturing) before anything is queued, and the
// capture stays valid: the graph's copy would read or write that memory at every launch, long
// after the call had unpinned it, where the garbage collector may have moved or reused it.
// Both copies were captured.
func TestFakeGoMemoryCopyCaptureRefused(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	copiesRefusedInCapture(t, dev, h, make([]byte, 4096), "Go memory")
}

// TestFakeOtherDevicePoolCopyCaptureRefused: an async copy to or from a buffer of a CUDAHost
// pool of another device, whose streams cannot order its reuse after this device's work (so
// the copy is synchronized on before the call returns), is refused on a capturing stream
// (cuda.ErrCapturing) before anything is queued, and the capture stays valid. The copy was
// captured and then synchronized on, which the driver refused
// (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED), invalidating the user's capture.
func TestFakeOtherDevicePoolCopyCaptureRefused(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	dev := f.Open(t, 0)
	h := newHeap(t, dev, Options{Capacity: 16 << 20, PurgeDelay: -1})
	pool, err := pinned.New(pinned.Options{Capacity: 4 << 20, Backend: pinned.CUDAHost, Device: 1, Devices: []int{0}})
	must(t, "pinned.New", err)
	defer pool.Close()
	b, err := pool.Alloc(4096)
	must(t, "Alloc", err)
	defer pool.Free(b)
	copiesRefusedInCapture(t, dev, h, b, "device 1's pool buffer")
}

// copiesRefusedInCapture checks that HtoDAsync and DtoHAsync of host buffer b (what) on a
// stream that captures are refused with cuda.ErrCapturing and leave the capture valid, and
// that b is copied once the capture has ended.
func copiesRefusedInCapture(t *testing.T, dev *cuda.Device, h *Heap, b []byte, what string) {
	t.Helper()
	s := newStream(t, dev, h)
	p := alloc(t, h, uintptr(len(b)), s)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(s, cuda.CaptureGlobal))
	htod := h.HtoDAsync(pcuda.DevicePtr(p), b, pcuda.Stream(s))
	dtoh := h.DtoHAsync(b, pcuda.DevicePtr(p), pcuda.Stream(s))
	g, err := dev.StreamEndCapture(s)
	if err != nil {
		t.Fatalf("the copies of %s invalidated the user's capture: %v", what, err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	if !errors.Is(htod, pcuda.ErrCapturing) || !errors.Is(dtoh, pcuda.ErrCapturing) {
		t.Errorf("HtoDAsync, DtoHAsync of %s during a capture = %v, %v; want errors matching cuda.ErrCapturing", what, htod, dtoh)
	}
	must(t, "HtoDAsync once the capture has ended", h.HtoDAsync(pcuda.DevicePtr(p), b, pcuda.Stream(s)))
	freeAll(t, h, []cuda.DevicePtr{p})
}

// TestFakePollBesideCaptureOnListlessHeap: a poll (Stats) that finds a stream the user destroyed
// without ForgetStream, with a free deferred on it, answers it with a synchronize of the context
// (streamq's Recover), which waits for the work the driver still runs there, unless a capture
// holds a stream the heap knows: that synchronize would end it. Here the capture is on c, a
// non-blocking stream whose heap holds a block but whose list left the lists (empty at
// listLinger polls): Recover asked only the lists' streams and the legacy stream (which answers
// for blocking streams only), so the poll's synchronize ended the user's capture. Now the heap's
// streams are asked too: the poll waits for nothing, the free stays deferred and the capture
// valid; once the capture has ended, a poll answers the destroyed stream and the free is done.
func TestFakePollBesideCaptureOnListlessHeap(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c, d := newStream(t, dev, h), newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	// Polls run while frees are deferred: one on d, held, until c's list, empty, has left.
	x := alloc(t, h, 4096, a)
	f.Hold(true)
	must(t, "MemsetAsync on d", h.MemsetAsync(pcuda.DevicePtr(x), 0, 4096, pcuda.Stream(d)))
	must(t, "FreeAsync on d", h.FreeAsync(pcuda.DevicePtr(x), pcuda.Stream(d)))
	for range listLinger {
		h.Stats()
	}
	f.CompleteStream(d)
	if st := h.Stats(); st.Deferred != 0 {
		t.Fatalf("d has passed the free: %d deferred, want 0", st.Deferred)
	}
	h.mu.Lock()
	list, heap := h.lists.Lookup(uintptr(c)), h.streams[pcuda.Stream(c)]
	h.mu.Unlock()
	if list != nil || heap == nil {
		t.Fatalf("c has a list %v, a heap %v; want no list (left at %d polls) and a heap", list != nil, heap != nil, listLinger)
	}
	s, _, _ := destroyedWithFrees(t, f, dev, h, a, 64<<10)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	st := h.Stats()
	g, err := dev.StreamEndCapture(c)
	if err != nil {
		t.Fatalf("a poll answering the destroyed stream invalidated the user's capture on a stream of the heap's: %v", err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	if st.Deferred != 1 {
		t.Errorf("a poll during the capture: %d deferred, want 1 (the free on the destroyed stream waits)", st.Deferred)
	}
	if st := h.Stats(); st.Deferred != 0 {
		t.Errorf("a poll after the capture: %d deferred, want 0 (the context synchronized for the destroyed stream)", st.Deferred)
	}
	must(t, "ForgetStream of the destroyed stream", h.ForgetStream(pcuda.Stream(s)))
	freeAll(t, h, []cuda.DevicePtr{keep})
}

// TestFakeIdlePurgeDestroyedStreamBesideCapture: the idle purge's answer to a stream destroyed
// without ForgetStream (TestFakeIdlePurgeDestroyedStream: a synchronize of the context, through
// streamq's Recover) while the user captures on c, a non-blocking stream whose heap the purge
// has trimmed and whose list of requests has left (empty at trimLinger ticks): the check before
// that synchronize asked only the lists' streams and the legacy stream, so the tick ended the
// capture. Now it asks the heap's streams too: the ticks wait for nothing and the capture stays
// valid (the destroyed stream's heap is parked); once it has ended, a tick answers the destroyed
// stream and its parked heap is trimmed.
func TestFakeIdlePurgeDestroyedStreamBesideCapture(t *testing.T) {
	f, dev, h := purgeHeap(t, false, true)
	if f == nil {
		return
	}
	c := newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	defer freeAll(t, h, []cuda.DevicePtr{keep})
	f.CompleteStream(c) // the heap's check of c
	for range trimLinger + 3 {
		h.purgeTick()
	}
	h.mu.Lock()
	list, purges := h.purge.trims.Lookup(uintptr(c)), h.st.Purges
	h.mu.Unlock()
	if list != nil || purges != 1 {
		t.Fatalf("c's heap quiet for %d ticks: %d purges, a list of requests %v; want 1, none", trimLinger+3, purges, list != nil)
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer f.Complete()
	live, _ := burstIdle(t, f, h, s, 2)
	defer freeAll(t, h, live)
	must(t, "StreamDestroy", dev.StreamDestroy(s))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	h.purgeTick() // the heap busy since the last look
	h.purgeTick() // quiet: its stream refused
	st := h.Stats()
	g, err := dev.StreamEndCapture(c)
	if err != nil {
		t.Fatalf("the idle purge's answer to the destroyed stream invalidated the user's capture on a stream of the heap's: %v", err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	h.mu.Lock()
	parked := h.parkedHeaps()
	h.mu.Unlock()
	if st.Purges != 1 || f.Pending() == 0 || parked != 1 {
		t.Errorf("ticks during the capture: %d purges, %d streams with work pending, %d heaps parked; "+
			"want 1 (c's), the destroyed stream's, its heap (refused: TestFakeRefusedReusedHandleFoundByPurge)",
			st.Purges, f.Pending(), parked)
	}
	h.purgeTick() // the context synchronized, the parked heap trimmed (its blocks live)
	h.mu.Lock()
	waits := h.parkedSyncWaits(nil)
	h.mu.Unlock()
	if f.Pending() != 0 || waits {
		t.Errorf("a tick after the capture: %d streams with work pending, a parked heap waits %v; want none, false", f.Pending(), waits)
	}
}

// TestFakeIdlePurgeDestroyedStreamBesideCopyCapture is
// TestFakeIdlePurgeDestroyedStreamBesideCapture with the capture on c, a non-blocking stream the
// heap has seen only through a copy: c has no heap and no list of the purge's, only a list of the
// deferred frees' lists. The purge's check before its synchronize of the context asked the
// heap's streams, its own lists' and the legacy stream, not the streams the heap's other lists
// had seen, so the tick that answered the destroyed stream ended the user's capture on c. Now it
// asks those too: the ticks wait for nothing during the capture, and one after it answers the
// destroyed stream.
func TestFakeIdlePurgeDestroyedStreamBesideCopyCapture(t *testing.T) {
	f, dev, h := purgeHeap(t, false, true)
	if f == nil {
		return
	}
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, a)
	defer freeAll(t, h, []cuda.DevicePtr{keep})
	must(t, "MemsetAsync on c", h.MemsetAsync(pcuda.DevicePtr(keep), 0, 4096, pcuda.Stream(c)))
	f.Complete()
	h.mu.Lock()
	heap, list := h.streams[pcuda.Stream(c)], h.lists.Lookup(uintptr(c))
	h.mu.Unlock()
	if heap != nil || list == nil {
		t.Fatalf("c has a heap %v, a list %v; want no heap, a list (a copy's check)", heap != nil, list != nil)
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer f.Complete()
	live, _ := burstIdle(t, f, h, s, 2)
	defer freeAll(t, h, live)
	must(t, "StreamDestroy", dev.StreamDestroy(s))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	for range 3 {
		h.purgeTick() // busy, then quiet: its stream refused
	}
	g, err := dev.StreamEndCapture(c)
	if err != nil {
		t.Fatalf("the idle purge's answer to the destroyed stream invalidated the user's capture on a stream the heap has seen: %v", err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	if f.Pending() == 0 {
		t.Error("ticks during the capture: no stream with work pending; want the destroyed stream's")
	}
	h.purgeTick() // the context synchronized, the heap trimmed
	if f.Pending() != 0 {
		t.Errorf("a tick after the capture: %d streams with work pending; want none", f.Pending())
	}
}

// TestFakeAllocReclaimsBesideCapture: an Alloc that runs out of memory while the user captures
// a graph on stream b, on which a free is deferred, reclaims what the other streams hold (a's
// heap, an empty segment) though it cannot wait for b's free, and is served from it. The
// reclaim's refusal of b (cuda.ErrCapturing) made the Alloc fail at once, with the memory it
// had just given to the arena free there: the same Alloc, repeated, succeeded.
//
// With b blocking, the legacy default stream cannot be waited for during the capture (the
// driver refuses any use of it then): a blocking stream's heap, whose frees come after the
// legacy stream's earlier work, keeps its memory, but a's, non-blocking, ordered after nothing
// but its own work, still gives its chunk back. Before, the refused wait for the legacy stream
// made the reclaim give nothing back, and the Alloc failed.
func TestFakeAllocReclaimsBesideCapture(t *testing.T) { allocReclaimsBesideCapture(t, false) }

// TestFakeAllocReclaimsBesideBlockingCapture: TestFakeAllocReclaimsBesideCapture with b blocking.
func TestFakeAllocReclaimsBesideBlockingCapture(t *testing.T) { allocReclaimsBesideCapture(t, true) }

func allocReclaimsBesideCapture(t *testing.T, blocking bool) {
	f, dev, h := runHeap(t, Options{Capacity: 6 << 20, PurgeDelay: -1}) // three chunks
	if f == nil {
		return
	}
	a, c, d := newStream(t, dev, h), newStream(t, dev, h), newStream(t, dev, h)
	b, e := newStreamFlags(t, dev, h, !blocking), newStreamFlags(t, dev, h, false)
	const n = 1 << 20
	must(t, "FreeAsync on a", h.FreeAsync(pcuda.DevicePtr(alloc(t, h, n, a)), pcuda.Stream(a))) // a keeps a chunk, empty
	must(t, "FreeAsync on e", h.FreeAsync(pcuda.DevicePtr(alloc(t, h, n, e)), pcuda.Stream(e))) // e, blocking, keeps the second
	x := alloc(t, h, 4096, c)                                                                   // c holds the third
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(x), pcuda.Stream(b)))                 // deferred on b
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(b, cuda.CaptureGlobal))
	p, err := h.Alloc(n, pcuda.Stream(d)) // a's chunk, once a's heap gives it back
	st := h.Stats()
	h.mu.Lock()
	eKept := h.streams[pcuda.Stream(e)].Stats().Segments > 0
	h.mu.Unlock()
	if blocking && !eKept {
		t.Errorf("e's heap, a blocking stream's, gave its memory back while the legacy stream's order could not be waited for")
	}
	g, cerr := dev.StreamEndCapture(b)
	if cerr != nil {
		t.Fatalf("the Alloc invalidated the user's capture: %v", cerr)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	if err != nil {
		t.Fatalf("Alloc of %d bytes on d, a's empty chunk reclaimable, b capturing with a free deferred: %v", n, err)
	}
	if st.Deferred != 1 {
		t.Errorf("during the capture: %d frees deferred, want 1 (b's waits for the capture's end)", st.Deferred)
	}
	must(t, "Sync", h.Sync())
	freeAll(t, h, []cuda.DevicePtr{uintptr(p)})
}

// TestFakeDefaultStreamWaitsBesideCapture: while the user captures a graph on b, a non-blocking
// stream of the heap's, the calls that wait for the legacy default stream (Trim with the legacy
// stream's heap holding memory, Sync with a free deferred on the legacy stream behind a memset
// held there, ForgetStream of the legacy stream) do their work and leave the capture valid. Each
// synchronized the context, which the driver refuses while any stream of it captures: the call
// failed with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the user's capture was ended.
func TestFakeDefaultStreamWaitsBesideCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, b) // b's heap holds memory
	defer f.Hold(false)
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Trim", h.Trim},
		{"Sync", h.Sync},
		{"ForgetStream of the legacy stream", func() error { return h.ForgetStream(0) }},
	} {
		// The legacy stream's heap holds a block freed there; a block of a's is freed there
		// behind a memset the fake holds.
		must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(alloc(t, h, 4096, 0)), 0))
		p := alloc(t, h, 4096, a)
		f.Hold(true)
		must(t, "MemsetAsync on the legacy stream", h.MemsetAsync(pcuda.DevicePtr(p), 1, 4096, 0))
		must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(p), 0))
		runtime.LockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(b, cuda.CaptureGlobal))
		err := c.call()
		g, cerr := dev.StreamEndCapture(b)
		runtime.UnlockOSThread()
		if cerr != nil {
			t.Fatalf("%s beside a capture on a non-blocking stream invalidated the capture (%v): %v", c.name, err, cerr)
		}
		must(t, "GraphDestroy", dev.GraphDestroy(g))
		if err != nil {
			t.Errorf("%s beside a capture on a non-blocking stream: %v", c.name, err)
		}
		f.Hold(false)
		must(t, "Sync", h.Sync())
	}
	if c := f.StickyError(); c != 0 {
		t.Fatalf("sticky error %d: memory given back under the legacy stream's memset", c)
	}
	freeAll(t, h, []cuda.DevicePtr{keep})
}

// TestFakeSyncCopyDuringCapture: HtoD, DtoH and DtoD copy on the legacy default stream and wait
// for it; while a blocking stream captures a CUDA graph the driver refuses that stream, and the
// refusal ends the user's capture. Each is refused up front with an error matching
// cuda.ErrCapturing, nothing queued: the capture stays valid and the destination unchanged.
// Before, each called the driver, which ended the capture.
func TestFakeSyncCopyDuringCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	s, blocking := newStream(t, dev, h), newBlockingStream(t, dev, h)
	const n = 4096
	p, q := alloc(t, h, n, s), alloc(t, h, n, s)
	want := bytes.Repeat([]byte{0x11}, n)
	must(t, "HtoD", h.HtoD(pcuda.DevicePtr(p), want))
	must(t, "HtoD", h.HtoD(pcuda.DevicePtr(q), want))
	host := bytes.Repeat([]byte{0x22}, n)
	for _, c := range []struct {
		how string
		op  func() error
	}{
		{"HtoD", func() error { return h.HtoD(pcuda.DevicePtr(p), bytes.Repeat([]byte{0x33}, n)) }},
		{"DtoH", func() error { return h.DtoH(host, pcuda.DevicePtr(p)) }},
		{"DtoD", func() error { return h.DtoD(pcuda.DevicePtr(q), pcuda.DevicePtr(p), n) }},
	} {
		runtime.LockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(blocking, cuda.CaptureGlobal))
		err := c.op()
		g, cerr := dev.StreamEndCapture(blocking)
		runtime.UnlockOSThread()
		if cerr != nil {
			t.Errorf("%s: the copy ended the user's capture: %v", c.how, cerr)
		} else {
			must(t, "GraphDestroy", dev.GraphDestroy(g))
		}
		if !errors.Is(err, pcuda.ErrCapturing) {
			t.Errorf("%s during a capture on a blocking stream: %v, want an error matching cuda.ErrCapturing", c.how, err)
		}
	}
	if !bytes.Equal(host, bytes.Repeat([]byte{0x22}, n)) {
		t.Error("DtoH wrote its destination though refused")
	}
	for _, b := range []cuda.DevicePtr{p, q} {
		got := make([]byte, n)
		must(t, "DtoH after the capture", h.DtoH(got, pcuda.DevicePtr(b)))
		if !bytes.Equal(got, want) {
			t.Errorf("block %#x changed by a refused copy: % x…", b, got[:8])
		}
	}
	freeAll(t, h, []cuda.DevicePtr{p, q})
}

// TestFakeOtherDeviceCapturingStreamRefused: a stream of another device is refused
// (ErrInvalidStream) whether or not it captures a CUDA graph. The first check of a stream records
// a point in it, which the driver refuses for another device's stream; a capturing stream gets no
// point (it would be a node of the user's graph), and was accepted unchecked: Alloc served a
// block for it, and the heap's later points and waits for that stream (its frees, its heap's
// memory) were refused by the driver and answered with a synchronize of this device's context,
// which does not wait for the other device's work. The capturing stream is now asked its context
// (cuStreamGetCtx, which a capture allows), and the capture stays valid.
func TestFakeOtherDeviceCapturingStreamRefused(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	dev, dev1 := f.Open(t, 0), f.Open(t, 1)
	h := newHeap(t, dev, Options{Capacity: 16 << 20, PurgeDelay: -1})
	s, err := dev1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	defer func() { must(t, "StreamDestroy", dev1.StreamDestroy(s)) }()
	if _, err := h.Alloc(4096, pcuda.Stream(s)); !errors.Is(err, ErrInvalidStream) {
		t.Errorf("Alloc for device 1's stream = %v, want an error wrapping ErrInvalidStream", err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev1.StreamBeginCapture(s, cuda.CaptureGlobal))
	p, aerr := h.Alloc(4096, pcuda.Stream(s))
	g, err := dev1.StreamEndCapture(s)
	if err != nil {
		t.Fatalf("the heap's check invalidated the user's capture on device 1's stream: %v", err)
	}
	must(t, "GraphDestroy", dev1.GraphDestroy(g))
	if !errors.Is(aerr, ErrInvalidStream) {
		t.Errorf("Alloc for device 1's stream while it captures = %#x, %v; want an error wrapping ErrInvalidStream", p, aerr)
	}
	if aerr == nil {
		must(t, "Free", h.Free(p))
		must(t, "ForgetStream", h.ForgetStream(pcuda.Stream(s)))
	}
}

// TestFakeAllocBesideCaptureWithDestroyedStream: a stream destroyed without ForgetStream has a
// free deferred (its list is lost: the driver refuses its handle), and the user captures a graph
// on c. A poll cannot answer the lost list during the capture (the synchronize of the context
// would end it), so the free waits; but an Alloc that finds room goes on. After streamq's
// Recover began to say that a capture put it off (ErrCapturing), every Alloc failed with it
// until the capture ended. Once it has, the next Alloc's poll does the free.
func TestFakeAllocBesideCaptureWithDestroyedStream(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c)
	destroyedWithFrees(t, f, dev, h, a, 64<<10)
	var p pcuda.DevicePtr
	var err error
	var deferred int
	duringCapture(t, dev, c, "the Alloc", func() {
		p, err = h.Alloc(4096, pcuda.Stream(a))
		h.mu.Lock()
		deferred = len(h.deferred)
		h.mu.Unlock()
	})
	if err != nil {
		t.Fatalf("Alloc on a during a capture on c, a destroyed stream's free deferred: %v; want a block", err)
	}
	if deferred != 1 {
		t.Errorf("during the capture: %d frees deferred, want 1 (the destroyed stream's waits)", deferred)
	}
	f.Hold(false)
	q := alloc(t, h, 4096, a)
	if st := h.Stats(); st.Deferred != 0 {
		t.Errorf("after the capture, an Alloc's poll left %d frees deferred, want 0", st.Deferred)
	}
	freeAll(t, h, []cuda.DevicePtr{uintptr(p), q, keep})
}

// TestFakeCloseBesideBlockingCapture: Close while the user captures a graph on c, a blocking
// stream the heap never used, with a destroyed stream's free deferred. The legacy stream, which
// Close must wait for, is refused during that capture: Close fails with ErrBusy and says the
// capture (cuda.ErrCapturing), leaving it valid. Before, it said only that the legacy stream had
// work in flight and advised a Sync, which the capture refuses too.
func TestFakeCloseBesideBlockingCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a, c := newStream(t, dev, h), newBlockingStream(t, dev, h)
	destroyedWithFrees(t, f, dev, h, a, 64<<10)
	var err error
	duringCapture(t, dev, c, "Close", func() { err = h.Close() })
	if !errors.Is(err, ErrBusy) || !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("Close during a capture: %v; want ErrBusy and cuda.ErrCapturing", err)
	}
	f.Hold(false)
}
