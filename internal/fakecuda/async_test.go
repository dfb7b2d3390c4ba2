package fakecuda

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// The fake runs queued work as late as CUDA allows (fakedriver.c.in, top): these tests pin down
// when, so that a program which reads or reuses memory before the work must have completed
// fails on the fake the way it can fail on a GPU.

// asyncFixture is device memory, pinned host memory and streams for the tests below.
type asyncFixture struct {
	f          *Driver
	d          *cuda.Device
	dev, dev2  cuda.DevicePtr
	host       uintptr // pinned, 2n bytes
	s, s2, blk cuda.Stream
	n          uintptr
}

func newAsyncFixture(t *testing.T, f *Driver, d *cuda.Device, n uintptr) *asyncFixture {
	t.Helper()
	x := &asyncFixture{f: f, d: d, n: n}
	var err error
	x.dev, err = d.MemAlloc(n)
	must(t, "MemAlloc", err)
	x.dev2, err = d.MemAlloc(n)
	must(t, "MemAlloc", err)
	x.host, err = d.MemHostAlloc(2*n, 0)
	must(t, "MemHostAlloc", err)
	x.s, err = d.StreamCreate(true)
	must(t, "StreamCreate", err)
	x.s2, err = d.StreamCreate(true)
	must(t, "StreamCreate", err)
	x.blk, err = d.StreamCreate(false) // blocking: ordered with the legacy stream
	must(t, "StreamCreate", err)
	t.Cleanup(func() {
		must(t, "Synchronize", d.Synchronize())
		for _, s := range []cuda.Stream{x.s, x.s2, x.blk} {
			must(t, "StreamDestroy", d.StreamDestroy(s))
		}
		must(t, "MemFree", d.MemFree(x.dev))
		must(t, "MemFree", d.MemFree(x.dev2))
		must(t, "MemFreeHost", d.MemFreeHost(x.host))
	})
	return x
}

// event creates an event with timing off, destroyed when the test ends.
func (x *asyncFixture) event(t *testing.T) cuda.Event {
	t.Helper()
	ev, err := x.d.EventCreate(true)
	must(t, "EventCreate", err)
	t.Cleanup(func() { must(t, "EventDestroy", x.d.EventDestroy(ev)) })
	return ev
}

// in is the first half of the pinned host buffer, out the second.
func (x *asyncFixture) in() []byte  { return mem.Bytes(x.host, x.n) }
func (x *asyncFixture) out() []byte { return mem.Bytes(x.host+x.n, x.n) }

func fill(b []byte, v byte) []byte {
	for i := range b {
		b[i] = v
	}
	return b
}

// devHolds reads dp back with a synchronous DtoH into pageable memory (which waits for the
// legacy stream, not for non-blocking streams) and reports whether every byte is v.
func (x *asyncFixture) devHolds(t *testing.T, dp cuda.DevicePtr, v byte) bool {
	t.Helper()
	got := make([]byte, x.n)
	must(t, "MemcpyDtoH", x.d.MemcpyDtoH(mem.Addr(got), dp, x.n))
	return bytes.Equal(got, fill(make([]byte, x.n), v))
}

// TestAsyncHtoDSendsTheSourceAtRun: a pinned source changed after an async HtoD is queued and
// before the stream is synchronized reaches the device changed, as it can on a GPU (the DMA
// reads it when the stream gets there); a pageable source is staged at the call.
func TestAsyncHtoDSendsTheSourceAtRun(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	must(t, "HtoD zero", d.MemcpyHtoD(x.dev, mem.Addr(fill(x.in(), 0)), x.n))

	fill(x.in(), 1)
	must(t, "HtoDAsync", d.MemcpyHtoDAsync(x.dev, x.host, x.n, x.s))
	fill(x.in(), 2) // the bug: the buffer is reused before the copy is known done
	if f.Pending() == 0 {
		t.Error("an async copy completed at the call")
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	if !x.devHolds(t, x.dev, 2) {
		t.Error("the device holds the source as it was at the call, not as it was when the copy ran")
	}

	// Registered memory is pinned too: read when the copy runs.
	buf := make([]byte, 2*gran)
	base := (mem.Addr(buf) + 4095) &^ 4095
	must(t, "MemHostRegister", d.MemHostRegister(base, gran, 0))
	reg := mem.Bytes(base, x.n)
	fill(reg, 3)
	must(t, "HtoDAsync from a registration", d.MemcpyHtoDAsync(x.dev, base, x.n, x.s))
	fill(reg, 4)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	must(t, "EventRecord", d.EventRecord(ev, x.s))
	must(t, "EventSynchronize", d.EventSynchronize(ev))
	must(t, "EventDestroy", d.EventDestroy(ev))
	must(t, "MemHostUnregister", d.MemHostUnregister(base))
	runtime.KeepAlive(buf)
	if !x.devHolds(t, x.dev, 4) {
		t.Error("a copy from registered memory read its source at the call")
	}

	// Pageable memory is staged while the call runs: a later change does not travel.
	page := fill(make([]byte, x.n), 5)
	must(t, "HtoDAsync from pageable memory", d.MemcpyHtoDAsync(x.dev, mem.Addr(page), x.n, x.s))
	fill(page, 6)
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	if !x.devHolds(t, x.dev, 5) {
		t.Error("a copy from pageable memory did not send the bytes of the call")
	}
}

// TestAsyncDtoHStaleUntilSynchronized: an async DtoH's pinned destination reads stale until a
// synchronizing call; a query of the stream with Hold answers not ready and changes nothing; a
// pageable destination is written before the call returns.
func TestAsyncDtoHStaleUntilSynchronized(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	must(t, "HtoD", d.MemcpyHtoD(x.dev, mem.Addr(fill(x.in(), 7)), x.n))
	fill(x.out(), 0)
	must(t, "DtoHAsync", d.MemcpyDtoHAsync(x.host+x.n, x.dev, x.n, x.s))
	if x.out()[0] != 0 || x.out()[x.n-1] != 0 {
		t.Fatal("an async DtoH wrote its destination at the call")
	}
	f.Hold(true)
	wantErr(t, "StreamQuery with Hold", d.StreamQuery(x.s), pinmalloc.ErrNotReady)
	if x.out()[0] != 0 {
		t.Error("a query that answered not ready ran the copy")
	}
	f.Hold(false)
	must(t, "StreamQuery", d.StreamQuery(x.s)) // finds the work pending: runs it, succeeds
	if !bytes.Equal(x.out(), fill(make([]byte, x.n), 7)) {
		t.Error("a successful StreamQuery left the copy undone")
	}

	// Event query and synchronize: done only as far as the event.
	ev := x.event(t)
	must(t, "HtoD", d.MemcpyHtoD(x.dev, mem.Addr(fill(x.in(), 8)), x.n))
	must(t, "DtoHAsync", d.MemcpyDtoHAsync(x.host+x.n, x.dev, x.n/2, x.s))
	must(t, "EventRecord", d.EventRecord(ev, x.s))
	must(t, "DtoHAsync after the event", d.MemcpyDtoHAsync(x.host+x.n+x.n/2, x.dev, x.n/2, x.s))
	must(t, "EventQuery", d.EventQuery(ev))
	if o := x.out(); o[0] != 8 || o[x.n/2] != 7 {
		t.Errorf("after the event: first half %d (want 8), second half %d (want 7, not run)", o[0], o[x.n/2])
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	if x.out()[x.n-1] != 8 {
		t.Error("StreamSynchronize left work undone")
	}

	// A pageable destination: the driver writes it during the call.
	page := make([]byte, x.n)
	must(t, "DtoHAsync to pageable memory", d.MemcpyDtoHAsync(mem.Addr(page), x.dev, x.n, x.s))
	if page[0] != 8 || page[x.n-1] != 8 {
		t.Error("an async DtoH to pageable memory returned before the copy was done")
	}
}

// TestAsyncEventOrdersStreams: work queued on stream B after a wait on an event recorded on A
// runs after A's work before the event: synchronizing B alone runs it. Without the wait B's
// work reads what the device held before.
func TestAsyncEventOrdersStreams(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	must(t, "HtoD", d.MemcpyHtoD(x.dev, mem.Addr(fill(x.in(), 1)), x.n))
	ev := x.event(t)

	fill(x.in(), 2)
	must(t, "HtoDAsync on A", d.MemcpyHtoDAsync(x.dev, x.host, x.n, x.s))
	must(t, "EventRecord on A", d.EventRecord(ev, x.s))
	must(t, "MemsetD8Async on A after the event", d.MemsetD8Async(x.dev, 3, x.n, x.s))
	must(t, "StreamWaitEvent B", d.StreamWaitEvent(x.s2, ev))
	must(t, "DtoDAsync on B", d.MemcpyDtoDAsync(x.dev2, x.dev, x.n, x.s2))
	must(t, "DtoHAsync on B", d.MemcpyDtoHAsync(x.host+x.n, x.dev2, x.n, x.s2))
	f.Hold(true)
	must(t, "StreamSynchronize B", d.StreamSynchronize(x.s2))
	if !bytes.Equal(x.out(), fill(make([]byte, x.n), 2)) {
		t.Error("B's work did not see A's copy before the event")
	}
	must(t, "EventQuery", d.EventQuery(ev)) // A has reached the event...
	wantErr(t, "StreamQuery A", d.StreamQuery(x.s), pinmalloc.ErrNotReady)
	f.Hold(false) // ...and not the memset after it
	must(t, "StreamSynchronize A", d.StreamSynchronize(x.s))
	if !x.devHolds(t, x.dev, 3) {
		t.Error("A's memset after the event did not run")
	}

	// No wait: B's copy runs when B is synchronized, before A's pending work.
	must(t, "MemsetD8Async on A", d.MemsetD8Async(x.dev, 4, x.n, x.s))
	must(t, "DtoDAsync on B", d.MemcpyDtoDAsync(x.dev2, x.dev, x.n, x.s2))
	must(t, "StreamSynchronize B", d.StreamSynchronize(x.s2))
	if !x.devHolds(t, x.dev2, 3) {
		t.Error("B's copy waited for A without being told to")
	}
	must(t, "Synchronize", d.Synchronize())
	if !x.devHolds(t, x.dev, 4) {
		t.Error("Synchronize did not run A's work")
	}
}

// TestAsyncWaitKeepsItsRecord: a cuStreamWaitEvent waits for the record the event had when
// the wait was queued; recording the event again later does not move the wait (D: "the wait
// is for the most recent cuEventRecord"; copyengine's fences put an event back in their pool
// and record it again while the waits of its earlier record are still queued).
func TestAsyncWaitKeepsItsRecord(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	ev := x.event(t)
	must(t, "MemsetD8Async on A", d.MemsetD8Async(x.dev, 1, x.n, x.s))
	must(t, "EventRecord on A", d.EventRecord(ev, x.s))
	must(t, "StreamWaitEvent B", d.StreamWaitEvent(x.s2, ev))
	must(t, "MemsetD8Async on A after the record", d.MemsetD8Async(x.dev, 2, x.n, x.s))
	must(t, "EventRecord on A again", d.EventRecord(ev, x.s))
	must(t, "DtoDAsync on B", d.MemcpyDtoDAsync(x.dev2, x.dev, x.n, x.s2))
	f.Hold(true)
	must(t, "StreamSynchronize B", d.StreamSynchronize(x.s2))
	if !x.devHolds(t, x.dev2, 1) {
		t.Error("B's wait followed the event's later record: it waited for A's second memset")
	}
	f.Hold(false)
	must(t, "StreamSynchronize A", d.StreamSynchronize(x.s))
}

// TestAsyncDestroyedStream: a stream destroyed with work queued is gone as a handle (record,
// wait, synchronize and query refuse it) but its work still runs (D: cuStreamDestroy returns at
// once, "the resources associated with hStream will be released automatically once the device
// has completed all work"), and an event recorded on it before is still a valid event to wait
// on: another stream waiting on it runs after that work, and a context synchronize runs it
// (pinned.Pool relies on that for buffers deferred on a stream destroyed before their point).
func TestAsyncDestroyedStream(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	must(t, "HtoD", d.MemcpyHtoD(x.dev, mem.Addr(fill(x.in(), 1)), x.n))
	ev := x.event(t)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	fill(x.in(), 2)
	f.Hold(true)
	must(t, "HtoDAsync", d.MemcpyHtoDAsync(x.dev, x.host, x.n, s))
	must(t, "EventRecord", d.EventRecord(ev, s))
	must(t, "StreamDestroy with work queued", d.StreamDestroy(s))
	wantErr(t, "EventRecord on a destroyed stream", d.EventRecord(ev, s), pinmalloc.ErrInvalidHandle)
	wantErr(t, "StreamWaitEvent of a destroyed stream", d.StreamWaitEvent(s, ev), pinmalloc.ErrInvalidHandle)
	wantErr(t, "StreamSynchronize of a destroyed stream", d.StreamSynchronize(s), pinmalloc.ErrInvalidHandle)
	wantErr(t, "StreamQuery of a destroyed stream", d.StreamQuery(s), pinmalloc.ErrInvalidHandle)
	wantErr(t, "EventQuery of its event, held", d.EventQuery(ev), pinmalloc.ErrNotReady)
	f.Hold(false)
	must(t, "StreamWaitEvent on its event", d.StreamWaitEvent(x.s2, ev))
	must(t, "DtoDAsync after the wait", d.MemcpyDtoDAsync(x.dev2, x.dev, x.n, x.s2))
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s2))
	if !x.devHolds(t, x.dev2, 2) {
		t.Error("a wait on an event of a destroyed stream did not order the work before it")
	}

	s, err = d.StreamCreate(true)
	must(t, "StreamCreate", err)
	fill(x.in(), 3)
	must(t, "HtoDAsync", d.MemcpyHtoDAsync(x.dev, x.host, x.n, s))
	must(t, "StreamDestroy with work queued", d.StreamDestroy(s))
	must(t, "Synchronize", d.Synchronize())
	if !x.devHolds(t, x.dev, 3) {
		t.Error("a context synchronize did not run a destroyed stream's work")
	}
}

// TestAsyncReusedStreamHandle: by default (ReuseStreamHandles on), a stream created after a
// destroy gets the destroyed stream's handle, the one destroyed last first, as the real driver
// hands out a destroyed stream's handle value again (R: rmm#649, rmm#2251, cccl#5132), even
// while the destroyed stream still has work queued. The handle then names the new stream alone: its
// flags, its queue (a query and a synchronize of it neither see nor run the old stream's work),
// while the old stream's work still runs at a context synchronize and its event stays its own.
// Off, every stream gets a handle of its own.
func TestAsyncReusedStreamHandle(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	must(t, "HtoD", d.MemcpyHtoD(x.dev, mem.Addr(fill(x.in(), 1)), x.n))
	ev := x.event(t)
	old, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	fill(x.in(), 2)
	f.Hold(true)
	defer f.Hold(false)
	must(t, "HtoDAsync", d.MemcpyHtoDAsync(x.dev, x.host, x.n, old))
	must(t, "EventRecord", d.EventRecord(ev, old))
	must(t, "StreamDestroy with work queued", d.StreamDestroy(old))
	s, err := d.StreamCreate(false)
	must(t, "StreamCreate", err)
	if s != old {
		t.Fatalf("a stream created after a destroy got handle %#x, not the destroyed stream's %#x", s, old)
	}
	if nb, err := d.StreamNonBlocking(s); err != nil || nb {
		t.Errorf("the new stream's flags: non-blocking %v, %v; want blocking, as created", nb, err)
	}
	must(t, "StreamQuery of the new stream, the old one's copy held", d.StreamQuery(s))
	must(t, "StreamSynchronize of the new stream", d.StreamSynchronize(s))
	if f.Pending() == 0 || !x.devHolds(t, x.dev, 1) {
		t.Error("a synchronize of the new stream ran the work of the destroyed stream whose handle it has")
	}
	wantErr(t, "EventQuery of the old stream's event, held", d.EventQuery(ev), pinmalloc.ErrNotReady)

	// The handle destroyed last goes first; the next, after it.
	s2, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	must(t, "StreamDestroy", d.StreamDestroy(s2))
	must(t, "StreamDestroy", d.StreamDestroy(s))
	a, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	b, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	if a != s || b != s2 {
		t.Errorf("after destroying %#x then %#x, new streams got %#x, %#x; want the one destroyed last first", s2, s, a, b)
	}
	f.ReuseStreamHandles(false)
	must(t, "StreamDestroy", d.StreamDestroy(b))
	c, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	if c == b || c == a || c == old {
		t.Errorf("with reuse off, a new stream got handle %#x, one already given out", c)
	}
	for _, s := range []cuda.Stream{a, c} {
		must(t, "StreamDestroy", d.StreamDestroy(s))
	}
	f.Hold(false)
	must(t, "Synchronize", d.Synchronize())
	if !x.devHolds(t, x.dev, 2) {
		t.Error("a context synchronize did not run the work of the stream whose handle was reused")
	}
	must(t, "EventQuery of the old stream's event", d.EventQuery(ev))
}

// TestAsyncLegacyStream: the synchronous calls run on the legacy default stream, which waits
// for blocking streams but not for non-blocking ones; a synchronous DtoD or memset of device
// memory returns before it has run (no host-side synchronization).
func TestAsyncLegacyStream(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	must(t, "HtoD", d.MemcpyHtoD(x.dev, mem.Addr(fill(x.in(), 1)), x.n))
	fill(x.in(), 2)
	must(t, "HtoDAsync on a non-blocking stream", d.MemcpyHtoDAsync(x.dev, x.host, x.n, x.s))
	if !x.devHolds(t, x.dev, 1) {
		t.Error("a synchronous DtoH waited for a non-blocking stream")
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	fill(x.in(), 3)
	must(t, "HtoDAsync on a blocking stream", d.MemcpyHtoDAsync(x.dev, x.host, x.n, x.blk))
	if !x.devHolds(t, x.dev, 3) {
		t.Error("a synchronous DtoH did not wait for a blocking stream")
	}
	// Blocking streams wait for the legacy stream: a DtoH queued on one after a synchronous
	// memset sees it.
	must(t, "MemsetD8", d.MemsetD8(x.dev, 4, x.n))
	must(t, "DtoHAsync on the blocking stream", d.MemcpyDtoHAsync(x.host+x.n, x.dev, x.n, x.blk))
	must(t, "StreamSynchronize", d.StreamSynchronize(x.blk))
	if x.out()[0] != 4 {
		t.Error("a blocking stream's copy ran before the legacy stream's memset queued earlier")
	}

	// A synchronous memset or DtoD of device memory is queued, not done: a non-blocking stream
	// does not see it.
	must(t, "MemsetD8", d.MemsetD8(x.dev, 5, x.n))
	must(t, "MemcpyDtoD", d.MemcpyDtoD(x.dev2, x.dev, x.n))
	must(t, "DtoHAsync on a non-blocking stream", d.MemcpyDtoHAsync(x.host+x.n, x.dev2, x.n, x.s))
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	if x.out()[0] == 5 {
		t.Error("a synchronous memset and DtoD of device memory ran before a synchronizing call")
	}
	must(t, "StreamSynchronize(legacy)", d.StreamSynchronize(0))
	if !x.devHolds(t, x.dev2, 5) {
		t.Error("the legacy stream's memset and DtoD did not run")
	}
	// A synchronous memset of pinned host memory is done on return.
	must(t, "MemsetD8 of pinned host memory", d.MemsetD8(x.host, 6, 16))
	if x.in()[15] != 6 {
		t.Error("a memset of pinned host memory returned before it was done")
	}

	// A synchronous HtoD from pageable memory returns once its source is staged: changing it
	// then is safe, and the copy is still queued on the legacy stream.
	page := fill(make([]byte, x.n), 7)
	must(t, "HtoD from pageable memory", d.MemcpyHtoD(x.dev, mem.Addr(page), x.n))
	fill(page, 8)
	must(t, "DtoHAsync on a non-blocking stream", d.MemcpyDtoHAsync(x.host+x.n, x.dev, x.n, x.s))
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	if x.out()[0] == 7 {
		t.Error("a pageable HtoD reached the device before a synchronizing call")
	}
	if !x.devHolds(t, x.dev, 7) {
		t.Error("a pageable HtoD did not send the bytes of the call")
	}
}

// TestAsyncLegacyEvent: an event recorded on the legacy default stream completes after the
// work queued before it on every blocking stream, not on non-blocking ones (the legacy
// stream's implicit synchronization, which device.Heap's Close relies on when it waits for a
// point there): with the queries held it is not done, even with nothing of the legacy
// stream's own before it; cuEventSynchronize runs the blocking stream's earlier memset and
// neither that stream's later one nor the non-blocking stream's. A point in a blocking stream
// behind the legacy stream's work is not run by a synchronize of the legacy stream.
func TestAsyncLegacyEvent(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	ev := x.event(t)
	must(t, "Synchronize", d.Synchronize())
	f.Hold(true)
	defer f.Hold(false)
	must(t, "EventRecord on the idle legacy stream", d.EventRecord(ev, 0))
	wantErr(t, "EventQuery of it, held", d.EventQuery(ev), pinmalloc.ErrNotReady)
	must(t, "EventSynchronize", d.EventSynchronize(ev))
	must(t, "EventQuery after its synchronize", d.EventQuery(ev))

	must(t, "MemsetD8Async on the blocking stream", d.MemsetD8Async(x.dev, 1, x.n, x.blk))
	must(t, "MemsetD8Async on a non-blocking stream", d.MemsetD8Async(x.dev2, 2, x.n, x.s))
	must(t, "EventRecord on the legacy stream", d.EventRecord(ev, 0))
	must(t, "MemsetD8Async on the blocking stream after it", d.MemsetD8Async(x.dev, 3, x.n, x.blk))
	wantErr(t, "EventQuery, held", d.EventQuery(ev), pinmalloc.ErrNotReady)
	must(t, "EventSynchronize", d.EventSynchronize(ev))
	wantErr(t, "StreamQuery of the blocking stream", d.StreamQuery(x.blk), pinmalloc.ErrNotReady)
	wantErr(t, "StreamQuery of the non-blocking stream", d.StreamQuery(x.s), pinmalloc.ErrNotReady)
	f.Hold(false)
	// Read on s2, ordered with nothing: what the device holds now.
	must(t, "DtoHAsync on s2", d.MemcpyDtoHAsync(x.host+x.n, x.dev, x.n, x.s2))
	must(t, "StreamSynchronize s2", d.StreamSynchronize(x.s2))
	if x.out()[0] != 1 {
		t.Errorf("after the legacy event's synchronize the device holds %d, want 1 (the blocking stream's earlier memset, not its later one)", x.out()[0])
	}
	must(t, "DtoHAsync on s2", d.MemcpyDtoHAsync(x.host+x.n, x.dev2, x.n, x.s2))
	must(t, "StreamSynchronize s2", d.StreamSynchronize(x.s2))
	if x.out()[0] == 2 {
		t.Error("the legacy event's synchronize ran a non-blocking stream's work")
	}

	// The other way: a point recorded in the blocking stream behind the legacy stream's work
	// waits for it, and a synchronize of the legacy stream does not wait for that point (a GPU
	// may not have reached it yet): device.Heap's Close must wait for such a point of its own
	// (its idle purge's) after the user has synchronized the legacy stream.
	must(t, "Synchronize", d.Synchronize())
	f.Hold(true)
	must(t, "MemsetD8Async on the legacy stream", d.MemsetD8Async(x.dev, 4, x.n, 0))
	must(t, "EventRecord on the blocking stream behind it", d.EventRecord(ev, x.blk))
	must(t, "StreamSynchronize(legacy)", d.StreamSynchronize(0))
	wantErr(t, "EventQuery of the blocking stream's point, held", d.EventQuery(ev), pinmalloc.ErrNotReady)
	wantErr(t, "StreamQuery of the blocking stream, held", d.StreamQuery(x.blk), pinmalloc.ErrNotReady)
	must(t, "StreamQuery of the legacy stream", d.StreamQuery(0))
	must(t, "EventSynchronize of the blocking stream's point", d.EventSynchronize(ev))
	must(t, "StreamQuery of the blocking stream after it", d.StreamQuery(x.blk))
	f.Hold(false)
}

// unmapUnderCopy queues a copy on x.s to a VMM granule and unmaps the granule under it
// (cuMemUnmap does not wait): the copy faults when x.s is synchronized, and the context's error
// is sticky from then on.
func (x *asyncFixture) unmapUnderCopy(t *testing.T) {
	t.Helper()
	d := x.d
	va, err := d.MemAddressReserve(gran, 0)
	must(t, "MemAddressReserve", err)
	h, err := d.MemCreate(gran)
	must(t, "MemCreate", err)
	must(t, "MemMap", d.MemMap(va, gran, h))
	must(t, "MemSetAccess", d.MemSetAccess(va, gran))
	must(t, "HtoDAsync to the granule", d.MemcpyHtoDAsync(va, x.host, x.n, x.s))
	must(t, "MemUnmap", d.MemUnmap(va, gran))
	must(t, "MemRelease", d.MemRelease(h))
	must(t, "MemAddressFree", d.MemAddressFree(va, gran))
	wantCode(t, "a copy to an unmapped granule", d.StreamSynchronize(x.s), ResultIllegalAddress)
}

// TestAsyncFrees: cuMemFree and cuMemFreeHost synchronize first; cuMemFreeAsync frees in stream
// order; memory unmapped or freed (from cuMemAllocAsync) under queued work makes that work
// fault when it runs, CUDA_ERROR_ILLEGAL_ADDRESS and sticky.
func TestAsyncFrees(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)

	// cuMemFree waits for the copies queued on the memory.
	p, err := d.MemAlloc(x.n)
	must(t, "MemAlloc", err)
	must(t, "HtoDAsync", d.MemcpyHtoDAsync(p, mem.Addr(fill(x.in(), 1)), x.n, x.s))
	must(t, "DtoHAsync", d.MemcpyDtoHAsync(x.host+x.n, p, x.n, x.s))
	fill(x.out(), 0)
	must(t, "MemFree", d.MemFree(p))
	if x.out()[0] != 1 {
		t.Error("cuMemFree did not run the work queued on the memory first")
	}

	// cuMemFreeAsync: the work queued before it still sees the memory.
	q, err := d.MemAllocAsync(x.n, x.s)
	must(t, "MemAllocAsync", err)
	fill(x.in(), 2)
	must(t, "HtoDAsync", d.MemcpyHtoDAsync(q, x.host, x.n, x.s))
	must(t, "DtoHAsync", d.MemcpyDtoHAsync(x.host+x.n, q, x.n, x.s))
	must(t, "MemFreeAsync", d.MemFreeAsync(q, x.s))
	wantErr(t, "MemFreeAsync twice", d.MemFreeAsync(q, x.s), pinmalloc.ErrInvalidValue)
	wantErr(t, "a copy queued after the free", d.MemcpyHtoDAsync(q, x.host, 16, x.s), pinmalloc.ErrInvalidValue)
	// Nor is memory whose free is queued host memory, to copy as pageable.
	wantErr(t, "DtoH into memory whose free is queued", d.MemcpyDtoH(uintptr(q), x.dev, 16), pinmalloc.ErrInvalidValue)
	wantErr(t, "HtoDAsync from memory whose free is queued", d.MemcpyHtoDAsync(x.dev, uintptr(q), 16, x.s), pinmalloc.ErrInvalidValue)
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	if x.out()[0] != 2 {
		t.Error("the work queued before cuMemFreeAsync did not run on the memory")
	}
	if f.StickyError() != 0 {
		t.Fatalf("stream-ordered free: sticky error %d", f.StickyError())
	}

	// Freed on another stream, with no dependency, while work on it is queued: the free runs
	// first when that stream is synchronized, and the work faults.
	q, err = d.MemAllocAsync(x.n, x.s)
	must(t, "MemAllocAsync", err)
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	must(t, "MemsetD8Async", d.MemsetD8Async(q, 3, x.n, x.s))
	must(t, "MemFreeAsync on another stream", d.MemFreeAsync(q, x.s2))
	must(t, "StreamSynchronize of the freeing stream", d.StreamSynchronize(x.s2))
	wantCode(t, "work on memory freed under it", d.StreamSynchronize(x.s), ResultIllegalAddress)
	wantCode(t, "a copy after the fault", d.MemcpyHtoDAsync(x.dev, x.host, 16, x.s), ResultIllegalAddress)
	wantCode(t, "Synchronize after the fault", d.Synchronize(), ResultIllegalAddress)
	f.ClearStickyError()

	// A VMM granule unmapped under a queued copy: cuMemUnmap does not wait.
	x.unmapUnderCopy(t)
	f.ClearStickyError()

	// A registration dropped under a queued copy: cuMemHostUnregister does not wait either.
	buf := make([]byte, 2*gran)
	base := (mem.Addr(buf) + 4095) &^ 4095
	must(t, "MemHostRegister", d.MemHostRegister(base, gran, 0))
	must(t, "DtoHAsync to the registration", d.MemcpyDtoHAsync(base, x.dev, x.n, x.s))
	must(t, "MemHostUnregister", d.MemHostUnregister(base))
	wantCode(t, "a copy to a dropped registration", d.StreamSynchronize(x.s), ResultIllegalAddress)
	f.ClearStickyError()
	runtime.KeepAlive(buf)
}

// TestAsyncStickyQueries: once the context has faulted, cuStreamQuery and cuEventQuery
// return the sticky error, as every call does on a GPU, also while the fake holds queued work
// (Hold), where they answered CUDA_ERROR_NOT_READY before: a caller polling a stream after a
// fault saw work still running instead of the error.
func TestAsyncStickyQueries(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	ev, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(ev)) }()

	// Work held on the second stream, an event behind it.
	f.Hold(true)
	defer f.Hold(false)
	must(t, "MemsetD8Async", d.MemsetD8Async(x.dev2, 1, x.n, x.s2))
	must(t, "EventRecord", d.EventRecord(ev, x.s2))
	wantErr(t, "StreamQuery of held work", d.StreamQuery(x.s2), pinmalloc.ErrNotReady)

	// A fault on the first stream: a copy to a VMM granule unmapped under it.
	x.unmapUnderCopy(t)

	// The held stream and event answer with the fault, not NOT_READY.
	wantCode(t, "StreamQuery of held work after the fault", d.StreamQuery(x.s2), ResultIllegalAddress)
	wantCode(t, "EventQuery of a held event after the fault", d.EventQuery(ev), ResultIllegalAddress)
	f.ClearStickyError()
}

// TestAsyncKernelReadsJobsAtRun: the gather kernel reads its job array when it runs, so a job
// array rewritten before the launch is known done sends the rewritten jobs, and a fault shows
// at the synchronizing call, not at the launch.
func TestAsyncKernelReadsJobsAtRun(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	m, err := d.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	defer func() { must(t, "ModuleUnload", d.ModuleUnload(m)) }()
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)
	jobs, err := d.MemHostAlloc(4096, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc", err)
	defer func() { must(t, "MemFreeHost", d.MemFreeHost(jobs)) }()
	one, block := cuda.Dim3{X: 1, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}

	must(t, "MemsetD8Async", d.MemsetD8Async(x.dev, 1, x.n, x.s))
	must(t, "MemsetD8Async", d.MemsetD8Async(x.dev2, 2, x.n, x.s))
	jobArray(jobs, [3]uint64{uint64(x.dev + x.n/2), uint64(x.dev2), uint64(x.n / 2)})
	must(t, "LaunchKernel", d.LaunchKernel(fn, one, block, 0, x.s, uint64(jobs), 1))
	jobArray(jobs, [3]uint64{uint64(x.dev2), uint64(x.dev), uint64(x.n / 2)}) // reused too early
	if f.Launches() != 0 {
		t.Error("the kernel ran at the launch")
	}
	must(t, "StreamSynchronize", d.StreamSynchronize(x.s))
	if f.Launches() != 1 {
		t.Errorf("launches run: %d", f.Launches())
	}
	if got := make([]byte, x.n); d.MemcpyDtoH(mem.Addr(got), x.dev2, x.n) != nil || got[0] != 1 || got[x.n-1] != 2 {
		t.Error("the kernel did not run the jobs the array held when it ran")
	}

	pageable := make([]uint64, 8) // the device cannot reach it (x.host, cuMemHostAlloc memory, it can)
	jobArray(jobs, [3]uint64{uint64(x.dev), uint64(mem.WordsAddr(pageable)), 64})
	must(t, "a launch that will fault", d.LaunchKernel(fn, one, block, 0, x.s, uint64(jobs), 1))
	if f.StickyError() != 0 {
		t.Error("the kernel faulted at the launch")
	}
	wantCode(t, "StreamSynchronize after a faulting launch", d.StreamSynchronize(x.s), ResultIllegalAddress)
	runtime.KeepAlive(pageable)
	f.ClearStickyError()
}

// TestAsyncConcurrentPipelines runs goroutines at once, each with two streams of its own: a
// copy in on one, an event, a wait, then copies on the other, synchronized through the second
// stream only; another goroutine's context sync (cuMemFree) may run any of their work. Every
// worker checks what came back. With -race it checks the fake's locking under these paths.
func TestAsyncConcurrentPipelines(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	workers, rounds := 4, 50
	if Long() {
		rounds = 200
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = pipeline(d, w, rounds)
		}()
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", w, err)
		}
	}
}

func pipeline(d *cuda.Device, w, rounds int) (err error) {
	const n = 32 << 10
	var a, b cuda.Stream
	var ev cuda.Event
	var dp, dq cuda.DevicePtr
	var host uintptr
	step := func(what string, e error) {
		if e != nil && err == nil {
			err = fmt.Errorf("%s: %w", what, e)
		}
	}
	a, e := d.StreamCreate(true)
	step("StreamCreate", e)
	b, e = d.StreamCreate(true)
	step("StreamCreate", e)
	ev, e = d.EventCreate(true)
	step("EventCreate", e)
	dp, e = d.MemAlloc(n)
	step("MemAlloc", e)
	dq, e = d.MemAlloc(n)
	step("MemAlloc", e)
	host, e = d.MemHostAlloc(2*n, 0)
	step("MemHostAlloc", e)
	if err != nil {
		return err
	}
	in, out := mem.Bytes(host, n), mem.Bytes(host+n, n)
	for r := 0; r < rounds && err == nil; r++ {
		v := byte(w*31 + r)
		fill(in, v)
		step("HtoDAsync", d.MemcpyHtoDAsync(dp, host, n, a))
		step("EventRecord", d.EventRecord(ev, a))
		step("StreamWaitEvent", d.StreamWaitEvent(b, ev))
		step("DtoDAsync", d.MemcpyDtoDAsync(dq, dp, n, b))
		step("DtoHAsync", d.MemcpyDtoHAsync(host+n, dq, n, b))
		if r%7 == 3 { // a context sync from this goroutine runs everyone's work
			tmp, e := d.MemAlloc(256)
			step("MemAlloc", e)
			step("MemFree", d.MemFree(tmp))
		}
		step("StreamSynchronize", d.StreamSynchronize(b))
		if err == nil && (out[0] != v || out[n-1] != v) {
			err = fmt.Errorf("round %d: got %d..%d, want %d", r, out[0], out[n-1], v)
		}
	}
	step("StreamSynchronize", d.StreamSynchronize(a))
	step("StreamDestroy", d.StreamDestroy(a))
	step("StreamDestroy", d.StreamDestroy(b))
	step("EventDestroy", d.EventDestroy(ev))
	step("MemFree", d.MemFree(dp))
	step("MemFree", d.MemFree(dq))
	step("MemFreeHost", d.MemFreeHost(host))
	return err
}

// TestEventRecordOtherDevice: an event is recorded only on a stream of its own device (D:
// "event and stream must be on the same device"), and a stream may wait on another device's
// event. pinned.Pool relies on the refusal to find streams it cannot order its reuse after.
func TestEventRecordOtherDevice(t *testing.T) {
	f := Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	d0, d1 := f.Open(t, 0), f.Open(t, 1)
	s1, err := d1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	defer func() { must(t, "StreamDestroy", d1.StreamDestroy(s1)) }()
	ev0, err := d0.EventCreate(true)
	must(t, "EventCreate on device 0", err)
	defer func() { must(t, "EventDestroy", d0.EventDestroy(ev0)) }()
	wantErr(t, "EventRecord of a device-0 event on a device-1 stream", d0.EventRecord(ev0, s1), pinmalloc.ErrInvalidHandle)
	wantErr(t, "the same, device 1 current", d1.EventRecord(ev0, s1), pinmalloc.ErrInvalidHandle)
	must(t, "EventRecord on device 0's legacy stream", d0.EventRecord(ev0, 0))
	must(t, "StreamWaitEvent of device 1 on it", d1.StreamWaitEvent(s1, ev0))
}

// TestStreamFlags: cuStreamGetFlags gives a stream its creation flags, the default streams 0,
// and refuses a destroyed stream's handle, as the driver does.
func TestStreamFlags(t *testing.T) {
	_, d := RunDevice(t)
	if d == nil {
		return
	}
	nb, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	blk, err := d.StreamCreate(false)
	must(t, "StreamCreate", err)
	for _, c := range []struct {
		name string
		s    cuda.Stream
		want bool
	}{{"non-blocking", nb, true}, {"blocking", blk, false}, {"legacy default", 0, false}, {"per-thread default", 2, false}} {
		if got, err := d.StreamNonBlocking(c.s); err != nil || got != c.want {
			t.Errorf("StreamNonBlocking(%s) = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	must(t, "StreamDestroy", d.StreamDestroy(blk))
	if _, err := d.StreamNonBlocking(blk); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("StreamNonBlocking of a destroyed stream: %v, want ErrInvalidHandle", err)
	}
	must(t, "StreamDestroy", d.StreamDestroy(nb))
}

// TestStreamContext: cuStreamGetCtx gives a stream's context whatever context is current (a
// stream of device 1's, asked with device 0's current, gives device 1's), the default streams
// the current one, and refuses a destroyed stream's handle, as the driver does.
func TestStreamContext(t *testing.T) {
	f, d := RunDevice(t)
	if d == nil {
		return
	}
	f.SetDevices(2)
	d1 := f.Open(t, 1)
	s0, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	s1, err := d1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	for _, c := range []struct {
		name string
		s    cuda.Stream
		want uintptr
	}{{"device 0's", s0, d.Context()}, {"device 1's", s1, d1.Context()}, {"legacy default", 0, d.Context()}} {
		if got, err := d.StreamContext(c.s); err != nil || got != c.want {
			t.Errorf("StreamContext(%s) = %#x, %v; want %#x", c.name, got, err, c.want)
		}
	}
	if d.Context() == d1.Context() {
		t.Errorf("devices 0 and 1 have one context %#x", d.Context())
	}
	must(t, "StreamDestroy on device 1", d1.StreamDestroy(s1))
	must(t, "StreamDestroy", d.StreamDestroy(s0))
	if _, err := d.StreamContext(s0); !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("StreamContext of a destroyed stream: %v, want ErrInvalidHandle", err)
	}
}

// TestLegacyHandle: CU_STREAM_LEGACY (handle 1) names the legacy default stream, as for the
// driver: work queued on it is work of stream 0, and a query or synchronize of it is accepted.
func TestLegacyHandle(t *testing.T) {
	f, d := RunDevice(t)
	if d == nil {
		return
	}
	p, err := d.MemAlloc(4096)
	must(t, "MemAlloc", err)
	defer d.MemFree(p)
	f.Hold(true)
	must(t, "MemsetD8Async on handle 1", d.MemsetD8Async(p, 7, 4096, 1))
	wantErr(t, "StreamQuery of stream 0 with handle 1's work held", d.StreamQuery(0), pinmalloc.ErrNotReady)
	f.Hold(false)
	must(t, "StreamSynchronize(1)", d.StreamSynchronize(1))
	must(t, "StreamQuery(0)", d.StreamQuery(0))
	if nb, err := d.StreamNonBlocking(1); err != nil || nb {
		t.Errorf("StreamNonBlocking(1) = %v, %v; want false", nb, err)
	}
}

// TestAsyncQueryOwnQueue: cuStreamQuery asks a stream's own queue, as the driver's does (a
// query is not an action that waits on another stream): a blocking stream with nothing queued
// is done while the legacy stream has work held, the legacy stream is done while a blocking
// stream has work held, and a blocking stream's work queued behind held legacy work is not.
// streamq's Points.Quiet and Settle's waits for their own points rely on it.
func TestAsyncQueryOwnQueue(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	x := newAsyncFixture(t, f, d, 64<<10)
	f.Hold(true)
	defer f.Hold(false)
	must(t, "MemsetD8Async on the legacy stream", d.MemsetD8Async(x.dev, 1, x.n, 0))
	must(t, "StreamQuery of the idle blocking stream, legacy work held", d.StreamQuery(x.blk))
	must(t, "StreamQuery of the idle non-blocking stream", d.StreamQuery(x.s))
	wantErr(t, "StreamQuery of the legacy stream", d.StreamQuery(0), pinmalloc.ErrNotReady)
	must(t, "MemsetD8Async on the blocking stream behind it", d.MemsetD8Async(x.dev2, 2, x.n, x.blk))
	wantErr(t, "StreamQuery of the blocking stream", d.StreamQuery(x.blk), pinmalloc.ErrNotReady)
	must(t, "StreamSynchronize of the legacy stream", d.StreamSynchronize(0))
	wantErr(t, "StreamQuery of the blocking stream, its own work held", d.StreamQuery(x.blk), pinmalloc.ErrNotReady)
	must(t, "StreamQuery of the legacy stream, a blocking stream's work held", d.StreamQuery(0))
}
