package pinned

import (
	"bytes"
	"errors"
	"runtime"
	"slices"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestFakeWaitStreamsRefusedReusedHandle: stream A, recorded on buffer x (RecordStream), has a
// copy into x queued (held) and a buffer freed on it; the user destroys A without
// ForgetStream. A reclaim (Trim) finds A's handle refused while the user captures a graph on
// stream c, which the pool knows: the synchronize of the context that would wait for A's work
// is put off (streamq's Lists.Recover), and the driver gives A's handle to a new stream b.
// WaitStreams(x) synchronized b, whose answer says nothing of A's copy, and returned nil with
// the copy still queued: the caller read x (or handed it to a network transfer) before the
// device's bytes landed in it. Now it answers A's refused handle as the reclaims do, with a
// synchronize of the context: refused while the capture lasts (ErrCapturing), made after it.
func TestFakeWaitStreamsRefusedReusedHandle(t *testing.T) {
	const n = 64 << 10
	r := newRefusedRig(t, n)
	if r == nil {
		return
	}
	f, dev, p, o, A, d := r.f, r.dev, r.p, r.p.order, r.A, r.d
	c, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7) ^ 0x5A
	}
	must(t, "HtoD", dev.MemcpyHtoD(d, mem.Addr(want), n))
	alloc := func(n int) []byte {
		t.Helper()
		b, err := p.Alloc(n)
		must(t, "Alloc", err)
		clear(b)
		return b
	}
	x, y, z := alloc(n), alloc(4096), alloc(4096)
	must(t, "RecordStream on A", p.RecordStream(x, cuda.Stream(A)))
	must(t, "RecordStream on c", p.RecordStream(z, cuda.Stream(c))) // the pool knows c
	f.Hold(true)
	must(t, "DtoHAsync on A", dev.MemcpyDtoHAsync(mem.Addr(x), d, n, A)) // held: lands in x later
	must(t, "FreeAsync on A", p.FreeAsync(y, cuda.Stream(A)))
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(A))

	endCapture := r.capture(t, c)
	defer endCapture()
	t.Logf("Trim during the capture: %v", p.Trim()) // finds A refused; Recover is put off
	o.reclMu.Lock()
	refused := slices.Contains(o.lists.RefusedLost(nil), streamq.Stream(A))
	o.reclMu.Unlock()
	if !refused {
		t.Fatal("the reclaim did not find A's handle refused: the test proves nothing")
	}
	b, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	if b != A {
		t.Fatalf("the driver gave the new stream %#x, not A's handle %#x: the test proves nothing", b, A)
	}

	werr := p.WaitStreams(x)
	if werr == nil && !bytes.Equal(x, want) {
		t.Error("WaitStreams during the capture returned nil with A's copy into the buffer still queued (it trusted the new stream on A's handle)")
	} else if werr != nil && !errors.Is(werr, cuda.ErrCapturing) {
		t.Errorf("WaitStreams during the capture: %v; want an error matching cuda.ErrCapturing", werr)
	}
	endCapture()
	werr = p.WaitStreams(x)
	if werr == nil && !bytes.Equal(x, want) {
		t.Error("WaitStreams after the capture returned nil with A's copy into the buffer still queued (it trusted the new stream on A's handle)")
	} else if werr != nil {
		t.Errorf("WaitStreams after the capture: %v; want nil (a synchronize of the context waits for A's copy)", werr)
	}

	f.Hold(false)
	must(t, "Trim", p.Trim()) // Recover: the context synchronized, y back
	r.finish(t, [][]byte{x, z}, b, c)
}

// TestFakeForgetRefusedReusedHandle: a buffer y freed on stream A behind a copy from it still
// queued (held), A destroyed without ForgetStream, and then forgotten while the user captures a
// graph on stream c, which the pool knows: the wait for A is refused (its handle is), and the
// synchronize of the context that would wait for its work instead would end the capture, so
// ForgetStream is refused (cuda.ErrCapturing) and A stays known, its buffer deferred. The
// driver gives A's handle to a new stream b. A reclaim once the capture has ended polled A's
// list, asked the handle (b, idle) and took y back with A's copy from it still queued: the next
// owner's bytes went to the device. Now the refusal ForgetStream met is the list's (streamq's
// Lists.Lose): it waits for a synchronize of the context, as if a poll had found it. The
// reclaim runs during the capture, which puts that synchronize off.
func TestFakeForgetRefusedReusedHandle(t *testing.T) { testForgetRefusedReusedHandle(t, false) }

// TestFakeForgetRefusedReusedHandleRecorded is TestFakeForgetRefusedReusedHandle with y recorded
// on A (RecordStream) rather than freed there, and freed once b has A's handle; reclaims before
// the reuse poll A's list, empty. They retired it (empty at two polls; streamq's polls keep a
// list lost on a refused handle now), and y's free made a new list for the handle, which the
// next reclaim asked: b, idle.
func TestFakeForgetRefusedReusedHandleRecorded(t *testing.T) { testForgetRefusedReusedHandle(t, true) }

// testForgetRefusedReusedHandle is TestFakeForgetRefusedReusedHandle, with y recorded on A and
// freed after the reuse when recorded.
func testForgetRefusedReusedHandle(t *testing.T, recorded bool) {
	const n = 64 << 10
	r := newRefusedRig(t, n)
	if r == nil {
		return
	}
	f, dev, p, o, A, d := r.f, r.dev, r.p, r.p.order, r.A, r.d
	c, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	y, err := p.Alloc(n)
	must(t, "Alloc", err)
	for i := range y {
		y[i] = 0xA
	}
	z, err := p.Alloc(4096)
	must(t, "Alloc", err)
	must(t, "RecordStream on c", p.RecordStream(z, cuda.Stream(c))) // the pool knows c
	f.Hold(true)
	if recorded {
		must(t, "RecordStream on A", p.RecordStream(y, cuda.Stream(A)))
	}
	must(t, "HtoDAsync on A", dev.MemcpyHtoDAsync(d, mem.Addr(y), n, A)) // held: reads y later
	if !recorded {
		must(t, "FreeAsync on A", p.FreeAsync(y, cuda.Stream(A)))
	}
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(A))

	endCapture := r.capture(t, c)
	defer endCapture()
	if ferr := p.ForgetStream(cuda.Stream(A)); !errors.Is(ferr, cuda.ErrCapturing) {
		t.Fatalf("ForgetStream of the destroyed stream during the capture: %v; want an error matching cuda.ErrCapturing: the test proves nothing", ferr)
	}
	if recorded {
		for range 3 { // reclaims during the capture: A's list is empty, asked nothing
			_ = p.Trim()
		}
	}
	b, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	if b != A {
		t.Fatalf("the driver gave the new stream %#x, not A's handle %#x: the test proves nothing", b, A)
	}
	if recorded {
		must(t, "Free", p.Free(y)) // waits for A, recorded on it
	}
	_ = p.Trim() // during the capture: no synchronize of the context answers A
	if !o.g.Held(mem.Addr(y)) && f.Pending() > 0 {
		t.Error("a reclaim took back the buffer A used with A's copy from it still queued (it trusted the new stream on A's handle)")
	}
	endCapture()
	next, err := p.Alloc(n) // the next owner writes its bytes, where y was if the pool took it
	must(t, "Alloc", err)
	for i := range next {
		next[i] = 0xB
	}
	f.Hold(false)
	must(t, "synchronize the context", dev.Synchronize()) // A's copy runs, if it has not
	got := make([]byte, n)
	must(t, "DtoH", dev.MemcpyDtoH(mem.Addr(got), d, n))
	if !bytes.Equal(got, bytes.Repeat([]byte{0xA}, n)) {
		t.Error("the device got the next owner's bytes: the destroyed stream's copy read a buffer the pool had handed out again")
	}
	must(t, "Trim", p.Trim())
	r.finish(t, [][]byte{next, z}, b, c)
}

// TestFakeWaitStreamsRefusedThenReused: a buffer y freed on stream A behind a copy from it
// still queued (held), and a buffer x recorded on A; A destroyed without ForgetStream.
// WaitStreams(x) meets the driver's refusal of A's handle (ErrInvalidStream), and the driver
// then gives the handle to a new stream b. The next reclaim polled A's list, asked the handle
// (b, idle) and took y back with A's copy from it still queued: the pool had met the refusal
// and kept nothing of it. Now WaitStreams' refusal is the list's (streamq's Lists.Lose), and the
// reclaim waits for the copy with a synchronize of the context.
func TestFakeWaitStreamsRefusedThenReused(t *testing.T) {
	const n = 64 << 10
	r := newRefusedRig(t, n)
	if r == nil {
		return
	}
	f, dev, p, o, A, d := r.f, r.dev, r.p, r.p.order, r.A, r.d
	y, err := p.Alloc(n)
	must(t, "Alloc", err)
	for i := range y {
		y[i] = 0xA
	}
	x, err := p.Alloc(4096)
	must(t, "Alloc", err)
	must(t, "RecordStream on A", p.RecordStream(x, cuda.Stream(A)))
	f.Hold(true)
	must(t, "HtoDAsync on A", dev.MemcpyHtoDAsync(d, mem.Addr(y), n, A)) // held: reads y later
	must(t, "FreeAsync on A", p.FreeAsync(y, cuda.Stream(A)))
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(A))
	if err := p.WaitStreams(x); !errors.Is(err, ErrInvalidStream) {
		t.Fatalf("WaitStreams of a buffer recorded on the destroyed stream: %v; want ErrInvalidStream: the test proves nothing", err)
	}
	b, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	if b != A {
		t.Fatalf("the driver gave the new stream %#x, not A's handle %#x: the test proves nothing", b, A)
	}
	t.Logf("Trim: %v", p.Trim())
	if !o.g.Held(mem.Addr(y)) && f.Pending() > 0 {
		t.Error("a reclaim took back the buffer freed on the destroyed stream with the copy from it still queued (it trusted the new stream on A's handle)")
	}
	f.Hold(false)
	must(t, "synchronize the context", dev.Synchronize())
	must(t, "Trim", p.Trim())
	r.finish(t, [][]byte{x}, b)
}

// refusedRig is what the tests of a stream A destroyed without ForgetStream start from: a
// CUDAHost pool on the fake driver, stream A, and device memory d for A's copies.
type refusedRig struct {
	f   *fakecuda.Driver
	dev *icuda.Device
	p   *Pool
	A   icuda.Stream
	d   icuda.DevicePtr
}

// newRefusedRig makes a refusedRig whose d holds n bytes; nil in the test process (the fake runs
// the test in a child).
func newRefusedRig(t *testing.T, n int) *refusedRig {
	t.Helper()
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return nil
	}
	r := &refusedRig{f: f, dev: dev}
	var err error
	r.p, err = New(Options{Backend: CUDAHost, Capacity: 16 << 20, PurgeDelay: -1})
	must(t, "New", err)
	r.A, err = dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	r.d, err = dev.MemAlloc(uintptr(n))
	must(t, "MemAlloc", err)
	return r
}

// finish ends a test of the rig: it frees bufs, forgets and destroys streams, frees d and closes
// the pool, each of which must succeed.
func (r *refusedRig) finish(t *testing.T, bufs [][]byte, streams ...icuda.Stream) {
	t.Helper()
	for _, b := range bufs {
		must(t, "Free", r.p.Free(b))
	}
	for _, s := range streams {
		must(t, "ForgetStream", r.p.ForgetStream(cuda.Stream(s)))
		must(t, "StreamDestroy", r.dev.StreamDestroy(s))
	}
	must(t, "MemFree", r.dev.MemFree(r.d))
	must(t, "Close", r.p.Close())
}

// capture begins a CUDA graph capture on c, on this goroutine's OS thread (locked until it
// ends), and returns its end: it checks the pool left the capture valid, and does nothing when
// called again.
func (r *refusedRig) capture(t *testing.T, c icuda.Stream) func() {
	t.Helper()
	runtime.LockOSThread()
	must(t, "StreamBeginCapture", r.dev.StreamBeginCapture(c, icuda.CaptureGlobal))
	ended := false
	return func() {
		t.Helper()
		if ended {
			return
		}
		ended = true
		g, err := r.dev.StreamEndCapture(c)
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatalf("the pool invalidated the user's capture: %v", err)
		}
		must(t, "GraphDestroy", r.dev.GraphDestroy(g))
	}
}

// must fails the test with what when err is not nil (package pinned's own tests; the external
// ones have theirs).
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// needCache skips a test of the FreeAsync cache, after giving the rig back, where the pool
// runs no fast sections (the race detector's builds) or the invariants build runs (whose
// checks change when the reclaims run, or take the reclaim lock such a test holds: why).
func (r *refusedRig) needCache(t *testing.T, why string) {
	t.Helper()
	if r.p.fast && !invariants.Enabled {
		return
	}
	must(t, "Close", r.p.Close())
	must(t, "StreamDestroy", r.dev.StreamDestroy(r.A))
	must(t, "MemFree", r.dev.MemFree(r.d))
	if invariants.Enabled {
		t.Skip(why)
	}
	t.Skip("the pool runs no fast sections here (the race detector's builds): no FreeAsync cache")
}
