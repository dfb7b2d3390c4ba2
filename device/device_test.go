package device

// Tests against the fake driver of internal/fakecuda (each runs in a child process that loads
// it), so they run on machines without a GPU. The fake's streams hold their work pending while
// Hold is on, which makes the window between a free and its event's completion as long as the
// test wants.

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/probe"
)

// public is d, a device opened through the binding (fakecuda), as the public API takes it.
func public(d *cuda.Device) *pcuda.Device { return cuda.Wrap[*pcuda.Device](d) }

func must(t testing.TB, what string, err error) {
	t.Helper()
	probe.Pause()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// newHeap makes a heap on dev and closes it at cleanup (after Sync), checking that no event
// is left.
func newHeap(t *testing.T, dev *cuda.Device, o Options) *Heap {
	t.Helper()
	h, err := New(public(dev), o)
	must(t, "New", err)
	t.Cleanup(func() {
		if !h.closed {
			must(t, "Sync", h.Sync())
			must(t, "Close", h.Close())
		}
		if n := h.Stats().Events; n != 0 {
			t.Errorf("%d events left after Close", n)
		}
	})
	return h
}

// runHeap runs the test against the fake driver (fakecuda.RunDevice) with a heap on device 0;
// f is nil in the test process, which then returns.
func runHeap(t *testing.T, o Options) (f *fakecuda.Driver, dev *cuda.Device, h *Heap) {
	t.Helper()
	if f, dev = fakecuda.RunDevice(t); f == nil {
		return nil, nil, nil
	}
	return f, dev, newHeap(t, dev, o)
}

// newStream creates a stream, forgotten by h and destroyed at cleanup.
func newStream(t *testing.T, dev *cuda.Device, h *Heap) cuda.Stream {
	t.Helper()
	return newStreamFlags(t, dev, h, true)
}

// newBlockingStream is newStream for a blocking stream, ordered with the legacy default stream.
func newBlockingStream(t *testing.T, dev *cuda.Device, h *Heap) cuda.Stream {
	t.Helper()
	return newStreamFlags(t, dev, h, false)
}

// newStreamFlags is newStream, non-blocking as nonBlocking says.
func newStreamFlags(t *testing.T, dev *cuda.Device, h *Heap, nonBlocking bool) cuda.Stream {
	t.Helper()
	s, err := dev.StreamCreate(nonBlocking)
	must(t, "StreamCreate", err)
	t.Cleanup(func() {
		if !h.closed {
			must(t, "ForgetStream", h.ForgetStream(pcuda.Stream(s)))
		}
		must(t, "StreamDestroy", dev.StreamDestroy(s))
	})
	return s
}

// freeAll frees blocks synchronously.
func freeAll(t *testing.T, h *Heap, ps []cuda.DevicePtr) {
	t.Helper()
	for _, p := range ps {
		must(t, "Free", h.Free(pcuda.DevicePtr(p)))
	}
}

func alloc(t *testing.T, h *Heap, n uintptr, s cuda.Stream) cuda.DevicePtr {
	t.Helper()
	p, err := h.Alloc(int(n), pcuda.Stream(s))
	must(t, "Alloc", err)
	return uintptr(p)
}

// TestFakeStreamOrderedReuse: a block freed on its own stream is reused there at once, one
// freed on another stream once that stream has passed the free, and a stream heap's empty
// segment stays with it. The idle purge is off: it rightly gives an idle stream's empty
// segment to the arena, and did so when the test paused for two purge delays after b's frees
// (a loaded machine), so that a's next allocation landed there.
func TestFakeStreamOrderedReuse(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	f.Hold(true)
	defer f.Complete()
	var live []cuda.DevicePtr // freed at the end
	take := func(n uintptr, s cuda.Stream) cuda.DevicePtr {
		p := alloc(t, h, n, s)
		live = append(live, p)
		return p
	}

	// Same stream: reused at once, even with work pending on the stream.
	p := alloc(t, h, 1000, a)
	must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 0, 1000, pcuda.Stream(a)))
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
	if q := alloc(t, h, 1000, a); q != p {
		t.Errorf("a block freed on its own stream was not reused at once: %#x, then %#x", p, q)
	}

	// Freed on another stream that used it: reusable only once that stream has passed the free.
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(p), 1, 1000, pcuda.Stream(b)))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	if st := h.Stats(); st.Deferred != 1 || st.DeferredFrees != 1 {
		t.Errorf("stats after a cross-stream free: %+v", st)
	}
	if q := take(1000, a); q == p {
		t.Fatalf("a block freed on stream b was reused on a before b's event completed")
	}
	f.CompleteStream(b)
	if r := take(1000, a); r != p {
		t.Errorf("after b's event completed, the block was not reused: %#x, want %#x", r, p)
	}
	if st := h.Stats(); st.Deferred != 0 {
		t.Errorf("deferred frees left: %d", st.Deferred)
	}

	// A block allocated and freed on b stays with b: a's allocations never land in b's
	// segment, even once it is empty.
	var onB []cuda.DevicePtr
	for i := 0; i < 64; i++ {
		onB = append(onB, alloc(t, h, 8<<10, b))
	}
	for _, x := range onB {
		must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(x), pcuda.Stream(b)))
	}
	lo := onB[0] &^ (2<<20 - 1)
	for i := 0; i < 512; i++ {
		if x := take(8<<10, a); x >= lo && x < lo+2<<20 {
			t.Fatalf("an allocation on a got %#x, in the segment b freed to", x)
		}
	}

	// Huge blocks go back to the arena: deferred even on their own stream.
	big := alloc(t, h, 4<<20, a)
	must(t, "MemsetAsync huge", h.MemsetAsync(pcuda.DevicePtr(big), 0, 4<<20, pcuda.Stream(a)))
	must(t, "FreeAsync huge", h.FreeAsync(pcuda.DevicePtr(big), pcuda.Stream(a)))
	if h.Stats().Deferred != 1 {
		t.Errorf("a huge free on its own stream was not deferred")
	}
	if x := take(4<<20, b); x == big {
		t.Errorf("a huge block freed on a was reused on b before a's event completed")
	}
	f.CompleteStream(a)
	if x := take(4<<20, b); x != big {
		t.Errorf("after a's event completed the huge block was not reused: %#x, want %#x", x, big)
	}
	if n := f.Stat(fakecuda.Events); n != h.Stats().Events || n == 0 {
		t.Errorf("events: fake %d, heap %d", n, h.Stats().Events)
	}
	f.Complete()
	freeAll(t, h, live)
}

func TestFakeClose(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	p := alloc(t, h, 100, s)
	if err := h.Close(); !errors.Is(err, heap.ErrLiveBlocks) {
		t.Errorf("Close with a live block = %v", err)
	}
	f.Hold(true)
	// The default stream uses p, then frees it: another stream's, with work queued, deferred.
	must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 0, 100, 0))
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), 0))
	if err := h.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with a free pending = %v", err)
	}
	must(t, "Sync", h.Sync())
	buf := make([]byte, 100)
	q := alloc(t, h, 100, s)
	must(t, "HtoDAsync", h.HtoDAsync(pcuda.DevicePtr(q), buf, pcuda.Stream(s)))
	must(t, "Free", h.Free(pcuda.DevicePtr(q)))
	if err := h.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close with a copy in flight = %v", err)
	}
	f.Complete()
	must(t, "ForgetStream", h.ForgetStream(pcuda.Stream(s)))
	must(t, "Close", h.Close())
	if err := h.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
	if _, err := h.Alloc(1, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close = %v", err)
	}
	if n := f.Stat(fakecuda.Events); n != 0 {
		t.Errorf("%d events left in the driver", n)
	}
}

func TestFakeErrors(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h1 := newHeap(t, dev, Options{Capacity: 16 << 20})
	h2 := newHeap(t, dev, Options{Capacity: 16 << 20})
	p := alloc(t, h1, 512, 0)
	if err := h2.Free(pcuda.DevicePtr(p)); !errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("Free into the wrong heap = %v", err)
	}
	if err := h2.FreeAsync(pcuda.DevicePtr(p), 0); !errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("FreeAsync into the wrong heap = %v", err)
	}
	raw, err := dev.MemAlloc(4096)
	must(t, "MemAlloc", err)
	if err := h1.Free(pcuda.DevicePtr(raw)); !errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("Free of a cuMemAlloc pointer = %v", err)
	}
	must(t, "MemFree", dev.MemFree(raw))
	if err := h1.Free(pcuda.DevicePtr(p + 256)); !errors.Is(err, heap.ErrInteriorPointer) {
		t.Errorf("Free of an interior pointer = %v", err)
	}
	const bogus = cuda.Stream(0xdead0)
	if _, err := h1.Alloc(64, pcuda.Stream(bogus)); !errors.Is(err, ErrInvalidStream) || !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("Alloc on an invalid stream = %v", err)
	}
	if err := h1.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(bogus)); !errors.Is(err, ErrInvalidStream) {
		t.Errorf("FreeAsync on an invalid stream = %v", err)
	}
	if err := h1.HtoDAsync(pcuda.DevicePtr(p), make([]byte, 8), pcuda.Stream(bogus)); !errors.Is(err, ErrInvalidStream) {
		t.Errorf("HtoDAsync on an invalid stream = %v", err)
	}
	if _, err := h1.Alloc(0, 0); !errors.Is(err, heap.ErrInvalidSize) {
		t.Errorf("Alloc(0) = %v", err)
	}
	if _, err := h1.Alloc(1<<30, 0); !errors.Is(err, heap.ErrTooLarge) {
		t.Errorf("Alloc beyond the capacity = %v", err)
	}
	f.Hold(true)
	s := newStream(t, dev, h1)
	must(t, "FreeAsync", h1.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	if err := h1.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("second FreeAsync while the first waits = %v", err)
	}
	if err := h1.Free(pcuda.DevicePtr(p)); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("Free while a FreeAsync waits = %v", err)
	}
	// The fake runs work again, for the cleanup's Sync and Close.
	f.Complete()
	f.Hold(false)
	must(t, "Sync", h1.Sync())
	if err := h1.Free(pcuda.DevicePtr(p)); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("Free after the deferred free = %v", err)
	}
	if _, err := New(nil, Options{}); !errors.Is(err, pinmalloc.ErrNoDriver) {
		t.Errorf("New(nil) = %v", err)
	}
	if _, err := New(public(dev), Options{Align: 128}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New with 128-byte alignment = %v", err)
	}
	// Options the arena or the heap refuses are the options' fault too: an alignment past
	// the documented 32768 said heap.ErrInvalidAlign alone, an absurd capacity
	// heap.ErrInvalidArgument alone.
	if _, err := New(public(dev), Options{Align: 1 << 20}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New with 1 MiB alignment = %v", err)
	}
	if _, err := New(public(dev), Options{Capacity: 1 << 48}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New with a 256 TiB capacity = %v", err)
	}
}

func TestFakeCopies(t *testing.T) {
	f, dev, h := runHeap(t, Options{Align: 4096, Capacity: 16 << 20})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	const n = 3 << 20
	src := bytes.Repeat([]byte("pinmalloc"), n/9+1)[:n]
	a, b := alloc(t, h, n, s), alloc(t, h, n, s)
	if a%4096 != 0 || b%4096 != 0 {
		t.Errorf("blocks %#x, %#x not 4096-aligned", a, b)
	}
	must(t, "HtoD", h.HtoD(pcuda.DevicePtr(a), src))
	must(t, "DtoD", h.DtoD(pcuda.DevicePtr(b), pcuda.DevicePtr(a), n))
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(b)))
	if !bytes.Equal(got, src) {
		t.Error("synchronous round trip changed the data")
	}
	// Asynchronous copies from memory the Go runtime does not manage.
	host, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	must(t, "mmap", err)
	defer unix.Munmap(host)
	copy(host, src)
	must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(a), 0, n, pcuda.Stream(s)))
	must(t, "HtoDAsync", h.HtoDAsync(pcuda.DevicePtr(b), host, pcuda.Stream(s)))
	must(t, "DtoDAsync", h.DtoDAsync(pcuda.DevicePtr(a), pcuda.DevicePtr(b), n, pcuda.Stream(s)))
	clear(host)
	must(t, "DtoHAsync", h.DtoHAsync(host, pcuda.DevicePtr(a), pcuda.Stream(s)))
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	if !bytes.Equal(host, src) {
		t.Error("asynchronous round trip changed the data")
	}
	for _, p := range []cuda.DevicePtr{a, b} {
		must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	}
}

// TestFakeReclaim fills the device from one stream, frees on that stream, and allocates on
// another: the held memory must be reclaimed (after synchronizing the first stream). The idle
// purge is off: a pause of two purge delays after the frees (a loaded machine) let it give
// the quiet stream's memory back first, and the allocation needed no reclaim.
func TestFakeReclaim(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetMemory(0, 16<<20)
	h := newHeap(t, dev, Options{PurgeDelay: -1}) // 14 MiB: 90 % of 16, in granules
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	var ps []cuda.DevicePtr
	for {
		p, err := h.Alloc(200<<10, pcuda.Stream(a))
		if err != nil {
			if !errors.Is(err, heap.ErrOutOfMemory) && !errors.Is(err, pinmalloc.ErrOutOfMemory) {
				t.Fatalf("Alloc until full = %v", err)
			}
			break
		}
		ps = append(ps, uintptr(p))
	}
	if len(ps) < 50 {
		t.Fatalf("only %d blocks of 200 KiB fit in 14 MiB", len(ps))
	}
	for _, p := range ps {
		must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
	}
	before := h.Stats().Reclaims // the failed Alloc above reclaimed once already
	p := alloc(t, h, 4<<20, b)
	if st := h.Stats(); st.Reclaims != before+1 {
		t.Errorf("reclaims = %d, want %d", st.Reclaims, before+1)
	}
	must(t, "Free", h.Free(pcuda.DevicePtr(p)))
}

// TestFakeMallocBackend runs a heap over cuMemAlloc regions, whose base is not chunk-aligned:
// every segment must still take one chunk, not two.
func TestFakeMallocBackend(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.SetVMM(false)
	h := newHeap(t, dev, Options{Capacity: 32 << 20})
	if name := h.Arena().Provider().Name(); name != "cuda-malloc" {
		t.Fatalf("provider %s, want cuda-malloc", name)
	}
	var ps []cuda.DevicePtr
	for i := 0; i < 40; i++ {
		ps = append(ps, alloc(t, h, 200<<10, 0))
	}
	st := h.Stats()
	if st.Arena.ChunksInUse > 5 {
		t.Errorf("40 blocks of 200 KiB hold %d chunks: segments are not one chunk each", st.Arena.ChunksInUse)
	}
	freeAll(t, h, ps)
}

// TestFakeConcurrent allocates and frees from several goroutines on several streams.
func TestFakeConcurrent(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 256 << 20})
	if f == nil {
		return
	}
	streams := []cuda.Stream{newStream(t, dev, h), newStream(t, dev, h), newStream(t, dev, h)}
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				s := streams[(g+i)%len(streams)]
				p, err := h.Alloc(int(64+(i*977)%(300<<10)), pcuda.Stream(s))
				if err == nil {
					err = h.FreeAsync(p, pcuda.Stream(streams[(g+2*i)%len(streams)]))
				}
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Live != 0 || st.Allocs != 1800 || st.Frees != 1800 {
		t.Errorf("stats after the run: %+v", st)
	}
}

// TestFakePeakInUse: Stats reports the peak of the bytes in use on each stream's heap, summed
// (metrics reported 0 for device heaps: Stats had no peak).
func TestFakePeakInUse(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	a, b := alloc(t, h, 1000, 0), alloc(t, h, 3<<20, s)
	freeAll(t, h, []cuda.DevicePtr{a, b})
	c := alloc(t, h, 100, 0)
	if st := h.Stats(); st.InUse != 100 || st.PeakInUse != 1000+3<<20 {
		t.Errorf("in use %d, peak %d; want 100 and %d", st.InUse, st.PeakInUse, 1000+3<<20)
	}
	freeAll(t, h, []cuda.DevicePtr{c})
}

func TestOpenWithoutDriver(t *testing.T) {
	if !fakecuda.RunWithoutDriver(t) {
		return
	}
	if _, err := Open(0, Options{}); !errors.Is(err, pinmalloc.ErrNoDriver) {
		t.Fatalf("Open without a driver = %v", err)
	}
}

// TestPressureHook fills a small heap; the next Alloc calls the pressure hook, which frees a
// block, and succeeds; while the hook frees nothing (unarmed, filling), Alloc fails.
func TestPressureHook(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	var held []cuda.DevicePtr
	var h *Heap
	calls, armed := 0, false
	h, err := New(public(dev), Options{Capacity: 4 << 20, Pressure: func(n int, s pcuda.Stream) bool {
		calls++
		if !armed || len(held) == 0 {
			return false
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(held[0])))
		held = held[1:]
		return true
	}})
	must(t, "New", err)
	for {
		p, err := h.Alloc(1<<20+1, 0) // huge objects: two chunks each
		if err != nil {
			break
		}
		held = append(held, uintptr(p))
	}
	if calls == 0 || len(held) == 0 {
		t.Fatalf("filling the heap: %d hook calls, %d blocks held", calls, len(held))
	}
	calls, armed = 0, true
	p, err := h.Alloc(1<<20+1, 0)
	must(t, "Alloc under pressure", err)
	if calls != 1 {
		t.Errorf("%d hook calls, want 1", calls)
	}
	held = append(held, uintptr(p))
	// SetPressure replaces the hook, returns the old one, and the new one sees the stream.
	sp, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	var gotStream cuda.Stream
	prev := h.SetPressure(func(n int, s pcuda.Stream) bool {
		gotStream = uintptr(s)
		if len(held) == 0 {
			return false
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(held[0])))
		held = held[1:]
		return true
	})
	if prev == nil {
		t.Fatal("SetPressure returned no previous hook")
	}
	calls = 0
	p, err = h.Alloc(1<<20+1, pcuda.Stream(sp))
	must(t, "Alloc under pressure, new hook", err)
	if gotStream != sp || calls != 0 {
		t.Errorf("the new hook saw stream %#x (want %#x); the old one was called %d times", gotStream, sp, calls)
	}
	held = append(held, uintptr(p))
	if h.SetPressure(nil) == nil {
		t.Error("SetPressure(nil) returned no previous hook")
	}
	if _, err := h.Alloc(64<<20, pcuda.Stream(sp)); err == nil {
		t.Error("an Alloc beyond the capacity succeeded without a hook")
	}
	for _, p := range held {
		must(t, "Free", h.Free(pcuda.DevicePtr(p)))
	}
	must(t, "ForgetStream", h.ForgetStream(pcuda.Stream(sp)))
	must(t, "Close", h.Close())
	must(t, "StreamDestroy", dev.StreamDestroy(sp))
}
