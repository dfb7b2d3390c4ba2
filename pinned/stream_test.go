package pinned_test

// Stream-ordered reuse against the fake driver: its streams run their work late (at a
// synchronize, or a query that finds it pending), and with Hold on a query answers "not
// ready", so a test keeps a copy queued as long as it wants.

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/probe"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// asyncRig is a CUDAHost pool, a device heap and a stream, on the fake.
type asyncRig struct {
	t    *testing.T
	f    *fakecuda.Driver
	dev  *cuda.Device
	pool *pinned.Pool
	heap *device.Heap
	s    cuda.Stream
}

// public is d, a device opened through the binding (fakecuda), as the public API takes it.
func public(d *cuda.Device) *pubcuda.Device { return cuda.Wrap[*pubcuda.Device](d) }

func newAsyncRig(t *testing.T, o pinned.Options) *asyncRig {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return nil
	}
	o.Backend = pinned.CUDAHost
	if o.Capacity == 0 {
		o.Capacity = 64 << 20
	}
	r := &asyncRig{t: t, f: f, dev: dev, pool: newPool(t, o)}
	var err error
	// The device heap only stages the copies: its idle purge is off, as it records events of
	// its own on a stream the tests keep busy, and the fake counts every event of the process
	// (TestFakeFreeAsync counted 2 for the pool's 1 when the purge looked during the test).
	if r.heap, err = device.New(public(dev), device.Options{Capacity: 64 << 20, PurgeDelay: -1}); err != nil {
		t.Fatal(err)
	}
	r.s = r.stream()
	t.Cleanup(func() {
		f.Hold(false)
		if err := r.heap.Sync(); err != nil && !errors.Is(err, device.ErrClosed) {
			t.Error(err)
		}
		if err := r.heap.Close(); err != nil && !errors.Is(err, device.ErrClosed) {
			t.Error(err)
		}
	})
	return r
}

// finish closes the heap, then the pool, and checks that the fake holds nothing of either.
func (r *asyncRig) finish() {
	r.t.Helper()
	r.f.Hold(false)
	ok(r.t, "heap Sync", r.heap.Sync())
	for _, s := range []cuda.Stream{r.s} {
		ok(r.t, "ForgetStream", r.heap.ForgetStream(pubcuda.Stream(s)))
	}
	ok(r.t, "heap Close", r.heap.Close())
	closePool(r.t, r.f, r.pool)
}

// stream makes a stream, forgotten by the heap and destroyed at cleanup.
func (r *asyncRig) stream() cuda.Stream {
	s, err := r.dev.StreamCreate(true)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		_ = r.dev.StreamSynchronize(s)
		err := r.heap.ForgetStream(pubcuda.Stream(s))
		if errors.Is(err, device.ErrClosed) {
			err = nil
		}
		if err := errors.Join(err, r.dev.StreamDestroy(s)); err != nil {
			r.t.Error(err)
		}
	})
	return s
}

func (r *asyncRig) alloc(n int, v byte) []byte {
	b, err := r.pool.Alloc(n)
	if err != nil {
		r.t.Fatalf("Alloc(%d): %v", n, err)
	}
	for i := range b {
		b[i] = v
	}
	return b
}

func (r *asyncRig) devAlloc(n int) cuda.DevicePtr {
	d, err := r.heap.Alloc(int(n), pubcuda.Stream(r.s))
	if err != nil {
		r.t.Fatal(err)
	}
	return uintptr(d)
}

// read copies n bytes of device memory at d back, synchronously, into Go memory.
func (r *asyncRig) read(d cuda.DevicePtr, n int) []byte {
	b := make([]byte, n)
	if err := r.heap.DtoH(b, pubcuda.DevicePtr(d)); err != nil {
		r.t.Fatal(err)
	}
	return b
}

func (r *asyncRig) deferred() uint64 { return r.pool.Stats().Deferred }

// freeBehindCopy frees a 4 KiB buffer on r.s behind an HtoDAsync from it into 4 KiB of device
// memory, which it returns, with the fake holding the copy from then on.
func (r *asyncRig) freeBehindCopy() cuda.DevicePtr {
	d := r.devAlloc(4096)
	b := r.alloc(4096, 7)
	r.f.Hold(true)
	ok(r.t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(r.s)))
	ok(r.t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	return d
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	probe.Pause()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestFakeFreeAfterHtoDAsync: HtoDAsync from a pool buffer, then a plain Free while the copy
// is queued. The pool used to hand the buffer to the next Alloc at once, whose owner's bytes
// the queued copy then sent to the device.
func TestFakeFreeAfterHtoDAsync(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	for _, n := range []int{100, 64 << 10, 700 << 10, 3 << 20} { // class, object and huge buffers
		r.f.Hold(true)
		d := r.devAlloc(n)
		a := r.alloc(n, 0xA1)
		ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, pubcuda.Stream(r.s)))
		ok(t, "Free", r.pool.Free(a))
		if got := r.deferred(); got != 1 {
			t.Fatalf("%d bytes: %d buffers deferred after a Free behind a queued copy, want 1", n, got)
		}
		b := r.alloc(n, 0xB2) // the next owner writes its bytes
		if mem.Addr(b) == mem.Addr(a) {
			t.Fatalf("%d bytes: the buffer of a queued copy was handed out again", n)
		}
		r.f.Hold(false)
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		if got := r.read(d, n); !bytes.Equal(got, bytes.Repeat([]byte{0xA1}, n)) {
			t.Fatalf("%d bytes: the device got the next owner's bytes", n)
		}
		if got := r.deferred(); got != 0 {
			t.Fatalf("%d bytes: %d buffers still deferred after the stream passed", n, got)
		}
		ok(t, "Free", r.pool.Free(b))
		ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	}
	if st := r.pool.Stats(); st.Live != 0 {
		t.Fatalf("%d buffers live at the end", st.Live)
	}
	r.finish()
}

// TestFakeZeroOnFreeAfterDtoHAsync: DtoHAsync into a buffer of a ZeroOnFree pool, then Free.
// The scrub used to run at Free, before the queued copy landed, so the next owner read the
// device's bytes. Now the scrub runs once the stream has passed the copy. The pool's purge is
// off: the test reads the buffer after its take-back, which a purge rightly decommits.
func TestFakeZeroOnFreeAfterDtoHAsync(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{ZeroOnFree: true, PurgeDelay: -1})
	if r == nil {
		return
	}
	const n = 48 << 10
	d := r.devAlloc(n)
	ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 0x5C, n, pubcuda.Stream(r.s)))
	r.f.Hold(true)
	c := r.alloc(n, 0)
	ok(t, "DtoHAsync", r.heap.DtoHAsync(c, pubcuda.DevicePtr(d), pubcuda.Stream(r.s)))
	ok(t, "Free", r.pool.Free(c))
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s)) // the copy lands in c now
	if got := r.deferred(); got != 0 {                       // Stats took c back: scrubbed
		t.Fatalf("%d buffers deferred after the stream passed", got)
	}
	if !bytes.Equal(mem.Bytes(mem.Addr(c), n), make([]byte, n)) {
		t.Fatal("a freed buffer holds the bytes a copy queued before its free wrote: the scrub ran before the copy")
	}
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeCloseWaitsForCopies: Free, then Close, with a copy from the buffer queued. Close
// used to return nil and unmap the memory, and the copy then faulted (a sticky
// CUDA_ERROR_ILLEGAL_ADDRESS). Now Close waits for the stream, and, when it will not pass in
// time, returns ErrBusy with the memory still mapped.
func TestFakeCloseWaitsForCopies(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	defer pinned.SetCloseWait(pinned.SetCloseWait(50 * time.Millisecond))
	const n = 256 << 10
	d := r.devAlloc(n)
	a := r.alloc(n, 0x3D)
	r.f.Hold(true)
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, pubcuda.Stream(r.s)))
	ok(t, "Free", r.pool.Free(a))
	err := r.pool.Close()
	if !errors.Is(err, pinned.ErrBusy) {
		t.Fatalf("Close with a copy queued from a freed buffer: %v, want ErrBusy", err)
	}
	if r.f.Stat(fakecuda.Mappings)+r.f.Stat(fakecuda.Registrations) == 0 {
		t.Fatal("Close unmapped the memory of a queued copy")
	}
	if _, err := r.pool.Alloc(1); !errors.Is(err, pinned.ErrClosed) {
		t.Fatalf("Alloc after Close: %v", err)
	}
	r.f.Hold(false)
	ok(t, "Close again", r.pool.Close()) // waits for the stream this time
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if got := r.read(d, n); !bytes.Equal(got, bytes.Repeat([]byte{0x3D}, n)) {
		t.Fatal("the queued copy did not carry the buffer's bytes")
	}
	if err := r.pool.Close(); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("a third Close: %v", err)
	}
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	ok(t, "heap Sync", r.heap.Sync())
	ok(t, "heap Close", r.heap.Close())
	if n := r.f.Stat(fakecuda.Mappings) + r.f.Stat(fakecuda.Registrations) + r.f.Stat(fakecuda.Reservations); n != 0 {
		t.Errorf("the fake holds %v after both closed", r.f.LiveObjects())
	}
}

// TestFakeFreeAsync: a buffer freed on a stream is handed out again only once the stream has
// passed the work queued before the free; an idle stream costs no event, a busy one one event
// for all the buffers freed on it between two reclaims.
func TestFakeFreeAsync(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	const n = 4 << 10
	d := r.devAlloc(n)
	first := r.alloc(n, 0)
	ok(t, "FreeAsync", r.pool.FreeAsync(first, pubcuda.Stream(r.s))) // a new stream is checked with an event
	records := r.f.Stat(fakecuda.EventRecords)
	for i := range 2000 { // the stream idle at every reclaim: no event
		b := r.alloc(n, byte(i))
		ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(r.s)))
		ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	}
	if got := r.f.Stat(fakecuda.EventRecords) - records; got != 0 {
		t.Errorf("%d events recorded for buffers freed on an idle stream", got)
	}
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	last := byte(1999 % 256)
	if got := r.read(d, n); got[0] != last || got[n-1] != last {
		t.Fatalf("the device holds %#x, want the last buffer's %#x", got[0], last)
	}
	if got := r.deferred(); got != 0 {
		t.Fatalf("%d buffers deferred after the stream passed", got)
	}

	r.f.Hold(true) // busy: the buffers stay, behind one event
	var held [][]byte
	for i := range 100 {
		b := r.alloc(n, byte(i))
		ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(r.s)))
		ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
		held = append(held, b)
	}
	if got := r.deferred(); got != 100 {
		t.Fatalf("%d buffers deferred on a busy stream, want 100", got)
	}
	if got := r.f.Stat(fakecuda.EventRecords) - records; got != 1 {
		t.Errorf("%d events recorded for 100 buffers freed on a busy stream, want 1", got)
	}
	for range 200 { // none of them is handed out meanwhile
		b := r.alloc(n, 0)
		for _, h := range held {
			if mem.Addr(b) == mem.Addr(h) {
				t.Fatal("a buffer freed on a busy stream was handed out again")
			}
		}
		ok(t, "Free", r.pool.Free(b))
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if got := r.deferred(); got != 0 {
		t.Fatalf("%d buffers deferred after the stream passed", got)
	}
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeRecordStreams: a buffer used on two streams, one of them through a slice of it (the
// record is keyed by the buffer, not the data pointer: pytorch#69124), goes back only once
// both have passed its free.
func TestFakeRecordStreams(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s2 := r.stream()
	const n = 64 << 10
	d1, d2 := r.devAlloc(n), r.devAlloc(n)
	b := r.alloc(n, 0x77)
	r.f.Hold(true)
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d1), b[100:200], pubcuda.Stream(r.s)))
	ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d2), 1, n, pubcuda.Stream(s2)))
	ok(t, "RecordStream", r.pool.RecordStream(b[n-10:], pubcuda.Stream(s2))) // say, a kernel reading it
	ok(t, "RecordStream twice", r.pool.RecordStream(b, pubcuda.Stream(s2)))
	ok(t, "Free", r.pool.Free(b))
	if got := r.deferred(); got != 1 {
		t.Fatalf("%d deferred, want 1", got)
	}
	r.f.CompleteStream(r.s)
	if got := r.deferred(); got != 1 {
		t.Fatalf("after the first stream passed: %d deferred, want 1 (the second still runs)", got)
	}
	r.f.CompleteStream(s2)
	if got := r.deferred(); got != 0 {
		t.Fatalf("after both streams passed: %d deferred, want 0", got)
	}
	r.f.Hold(false)
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d1)))
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d2)))
	ok(t, "ForgetStream", r.heap.ForgetStream(pubcuda.Stream(s2)))
	r.finish()
}

// TestFakeStreamMisuse: the mistakes around stream-ordered frees are errors that change
// nothing, never a lost or doubly freed buffer.
func TestFakeStreamMisuse(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	r.f.Hold(true)
	d := r.devAlloc(1000)
	ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 0, 1000, pubcuda.Stream(r.s))) // the stream is busy
	b := r.alloc(1000, 1)
	ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	for what, err := range map[string]error{
		"FreeAsync twice":          r.pool.FreeAsync(b, pubcuda.Stream(r.s)),
		"Free after FreeAsync":     r.pool.Free(b),
		"RecordStream after free":  r.pool.RecordStream(b, pubcuda.Stream(r.s)),
		"HtoDAsync from freed buf": r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(r.s)),
	} {
		if !errors.Is(err, pinned.ErrDoubleFree) {
			t.Errorf("%s: %v, want ErrDoubleFree", what, err)
		}
	}
	c := r.alloc(4096, 2)
	if err := r.pool.FreeAsync(c[:100:100], pubcuda.Stream(r.s)); !errors.Is(err, pinned.ErrSubSlice) {
		t.Errorf("FreeAsync of a sub-slice: %v", err)
	}
	if err := r.pool.FreeAsync(c, 0xdead0); !errors.Is(err, pinned.ErrInvalidStream) {
		t.Errorf("FreeAsync on a bogus stream: %v", err)
	}
	if err := r.pool.RecordStream(c, 0xdead0); !errors.Is(err, pinned.ErrInvalidStream) {
		t.Errorf("RecordStream of a bogus stream: %v", err)
	}
	if err := r.pool.FreeAsync(make([]byte, 64), pubcuda.Stream(r.s)); !errors.Is(err, pinned.ErrNotOwned) {
		t.Errorf("FreeAsync of Go memory: %v", err)
	}
	if err := r.pool.RecordStream(make([]byte, 64), pubcuda.Stream(r.s)); !errors.Is(err, pinned.ErrNotOwned) {
		t.Errorf("RecordStream of Go memory: %v", err)
	}
	ok(t, "RecordStream", r.pool.RecordStream(c[10:20], pubcuda.Stream(r.s)))
	if err := r.pool.Free(c[:100:100]); !errors.Is(err, pinned.ErrSubSlice) {
		t.Errorf("Free of a sub-slice of a recorded buffer: %v", err)
	}
	ok(t, "Free", r.pool.Free(c))
	if err := r.pool.Free(c); !errors.Is(err, pinned.ErrDoubleFree) {
		t.Errorf("Free twice of a recorded buffer: %v", err)
	}
	if st := r.pool.Stats(); st.Deferred != 2 || st.Live != 2 {
		t.Errorf("deferred %d, live %d; want 2 and 2", st.Deferred, st.Live)
	}
	r.f.Hold(false)
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeStreamDestroyed: buffers deferred on a stream that is destroyed before the pool
// takes them back come back once the context has passed the stream's work.
func TestFakeStreamDestroyed(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	const n = 8 << 10
	d := r.devAlloc(n)
	a := r.alloc(n, 0x42)
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, pubcuda.Stream(s)))
	ok(t, "FreeAsync", r.pool.FreeAsync(a, pubcuda.Stream(s)))
	ok(t, "ForgetStream", r.heap.ForgetStream(pubcuda.Stream(s)))
	ok(t, "StreamDestroy", r.dev.StreamDestroy(s))
	if got := r.deferred(); got != 0 {
		t.Fatalf("%d buffers deferred on a destroyed stream", got)
	}
	if got := r.read(d, n); !bytes.Equal(got, bytes.Repeat([]byte{0x42}, n)) {
		t.Fatal("the copy of a buffer freed on a destroyed stream did not carry its bytes")
	}
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestFreeAsyncWithoutDriver: a pool the driver copies synchronously (Locked) frees at once,
// and RecordStream only checks the buffer.
func TestFreeAsyncWithoutDriver(t *testing.T) {
	p := newPool(t, pinned.Options{Capacity: 4 << 20})
	b, err := p.Alloc(100)
	ok(t, "Alloc", err)
	ok(t, "RecordStream", p.RecordStream(b[5:10], 0x1234))
	if err := p.RecordStream(make([]byte, 8), 0x1234); !errors.Is(err, pinned.ErrNotOwned) {
		t.Errorf("RecordStream of Go memory: %v", err)
	}
	ok(t, "FreeAsync", p.FreeAsync(b, pubcuda.Stream(0x1234)))
	if st := p.Stats(); st.Live != 0 || st.Deferred != 0 {
		t.Errorf("after FreeAsync on a pool without a driver: %d live, %d deferred", st.Live, st.Deferred)
	}
	if err := p.FreeAsync(b, 0x1234); !errors.Is(err, pinned.ErrDoubleFree) {
		t.Errorf("FreeAsync twice: %v", err)
	}
	ok(t, "Close", p.Close())
}

// TestFakeLastFreeAfterClose: Close with buffers live (ErrLiveBlocks), then the last of them
// freed with FreeAsync, and one freed with Free after a copy recorded its stream: the pool's
// memory goes with the last free, once the streams have passed.
func TestFakeLastFreeAfterClose(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	const n = 32 << 10
	d := r.devAlloc(n)
	a, b := r.alloc(n, 1), r.alloc(n, 2)
	if err := r.pool.Close(); !errors.Is(err, pinned.ErrLiveBlocks) {
		t.Fatalf("Close with live buffers: %v", err)
	}
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, pubcuda.Stream(r.s)))
	ok(t, "Free after Close", r.pool.Free(a))
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(r.s)))
	ok(t, "FreeAsync after Close", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	if n := r.f.Stat(fakecuda.Mappings) + r.f.Stat(fakecuda.Registrations); n == 0 {
		t.Fatal("nothing mapped: the device heap's memory should be")
	}
	if got := r.read(d, n); got[0] != 2 {
		t.Fatalf("the device holds %d, want the last copy's 2", got[0])
	}
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	ok(t, "heap Sync", r.heap.Sync())
	ok(t, "ForgetStream", r.heap.ForgetStream(pubcuda.Stream(r.s)))
	ok(t, "heap Close", r.heap.Close())
	if n := r.f.Stat(fakecuda.Mappings) + r.f.Stat(fakecuda.Registrations) + r.f.Stat(fakecuda.Reservations); n != 0 {
		t.Errorf("the pool's memory outlived its last free: the fake holds %v", r.f.LiveObjects())
	}
}

// TestFakeStreamOfAnotherDevice: a pool orders its reuse after streams of its own device only.
// A copy by another device's heap from a buffer of a pool granted to that device waits for its
// stream (so a Free at once is safe), and FreeAsync or RecordStream with another device's stream
// is refused (the pool could wait for it with no event of its own).
func TestFakeStreamOfAnotherDevice(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	dev1 := f.Open(t, 1)
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 64 << 20, Devices: []int{1}})
	h, err := device.New(public(dev1), device.Options{Capacity: 16 << 20})
	ok(t, "device.New on device 1", err)
	s1, err := dev1.StreamCreate(true)
	ok(t, "StreamCreate on device 1", err)
	const n = 64 << 10
	d, err := h.Alloc(n, pubcuda.Stream(s1))
	ok(t, "Alloc", err)
	b, err := p.Alloc(n)
	ok(t, "pool Alloc", err)
	copy(b, bytes.Repeat([]byte{0x5A}, n))
	f.Hold(true)
	ok(t, "HtoDAsync by device 1", h.HtoDAsync(d, b, pubcuda.Stream(s1)))
	ok(t, "Free", p.Free(b))
	c, err := p.Alloc(n) // the same memory, most likely: the copy must be done
	ok(t, "pool Alloc", err)
	copy(c, bytes.Repeat([]byte{0xEE}, n))
	f.Hold(false)
	got := make([]byte, n)
	ok(t, "StreamSynchronize", dev1.StreamSynchronize(s1))
	ok(t, "DtoH", h.DtoH(got, d))
	if !bytes.Equal(got, bytes.Repeat([]byte{0x5A}, n)) {
		t.Fatal("device 1 got the next owner's bytes")
	}
	if err := p.FreeAsync(c, pubcuda.Stream(s1)); !errors.Is(err, pinned.ErrInvalidStream) {
		t.Errorf("FreeAsync on another device's stream: %v", err)
	} else if !strings.Contains(err.Error(), "refused as a stream of CUDA device 0") {
		t.Errorf("FreeAsync on another device's stream: %q does not say that device 0 refused the stream", err)
	}
	if err := p.RecordStream(c, pubcuda.Stream(s1)); !errors.Is(err, pinned.ErrInvalidStream) {
		t.Errorf("RecordStream of another device's stream: %v", err)
	}
	ok(t, "Free", p.Free(c))
	ok(t, "device Free", h.Free(d))
	ok(t, "ForgetStream", h.ForgetStream(pubcuda.Stream(s1)))
	ok(t, "heap Close", h.Close())
	ok(t, "StreamDestroy", dev1.StreamDestroy(s1))
	closePool(t, f, p)
}

// TestFakeConcurrentRecords: two goroutines record their streams on one fresh buffer at once
// (two copies from one source, say). Both records hold, whichever writes the buffer's tag
// first, and the Free after them waits for both streams.
func TestFakeConcurrentRecords(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s2 := r.stream()
	d := r.devAlloc(4 << 10)
	r.f.Hold(true)
	for i := range 500 {
		b := r.alloc(4<<10, 1)
		for _, s := range []cuda.Stream{r.s, s2} { // work on each stream, that the free waits for
			ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 1, 4<<10, pubcuda.Stream(s)))
		}
		errs := make(chan error, 2)
		for _, s := range []cuda.Stream{r.s, s2} {
			go func() { errs <- r.pool.RecordStream(b, pubcuda.Stream(s)) }()
		}
		ok(t, "RecordStream", errors.Join(<-errs, <-errs))
		ok(t, "Free", r.pool.Free(b))
		if got := r.deferred(); got != 1 {
			t.Fatalf("round %d: %d deferred, want 1", i, got)
		}
		r.f.CompleteStream(r.s)
		if got := r.deferred(); got != 1 {
			t.Fatalf("round %d: %d deferred after the first stream passed, want 1", i, got)
		}
		r.f.CompleteStream(s2)
		if got := r.deferred(); got != 0 {
			t.Fatalf("round %d: %d deferred after both streams passed, want 0", i, got)
		}
	}
	r.f.Hold(false)
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	ok(t, "ForgetStream", r.heap.ForgetStream(pubcuda.Stream(s2)))
	r.finish()
}

// TestFakeAllocTooLargeWaitsForNoStream: an Alloc or AllocAligned that no memory could serve,
// of more than the pool's capacity or aligned beyond it, fails with ErrTooLarge at once. An
// alignment beyond the capacity was refused by the heap as out of memory, and the pool then
// retried eight times, holding every shard, and waited for every stream with buffers deferred
// on it (a synchronize of each: the caller's thread stalled behind the GPU's work) first.
func TestFakeAllocTooLargeWaitsForNoStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{Capacity: 64 << 20})
	if r == nil {
		return
	}
	d := r.freeBehindCopy() // the fake holds the copy queued from then on
	for _, c := range []struct{ n, align int }{{64<<20 + 1, 0}, {1 << 40, 0}, {4096, 1 << 30}} {
		var err error
		if c.align == 0 {
			_, err = r.pool.Alloc(c.n)
		} else {
			_, err = r.pool.AllocAligned(c.n, c.align)
		}
		if !errors.Is(err, pinned.ErrTooLarge) {
			t.Fatalf("Alloc of %d bytes aligned to %d in a pool of 64 MiB: %v, want ErrTooLarge", c.n, c.align, err)
		}
		if r.f.Pending() == 0 || r.deferred() != 1 {
			t.Fatalf("Alloc of %d bytes aligned to %d in a pool of 64 MiB waited for the stream of a deferred buffer", c.n, c.align)
		}
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
