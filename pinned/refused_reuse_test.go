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
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	p, err := New(Options{Backend: CUDAHost, Capacity: 16 << 20, PurgeDelay: -1})
	must("New", err)
	o := p.order
	A, err := dev.StreamCreate(true)
	must("StreamCreate", err)
	c, err := dev.StreamCreate(true)
	must("StreamCreate", err)
	const n = 64 << 10
	d, err := dev.MemAlloc(n)
	must("MemAlloc", err)
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7) ^ 0x5A
	}
	must("HtoD", dev.MemcpyHtoD(d, mem.Addr(want), n))
	alloc := func(n int) []byte {
		t.Helper()
		b, err := p.Alloc(n)
		must("Alloc", err)
		clear(b)
		return b
	}
	x, y, z := alloc(n), alloc(4096), alloc(4096)
	must("RecordStream on A", p.RecordStream(x, cuda.Stream(A)))
	must("RecordStream on c", p.RecordStream(z, cuda.Stream(c))) // the pool knows c
	f.Hold(true)
	must("DtoHAsync on A", dev.MemcpyDtoHAsync(mem.Addr(x), d, n, A)) // held: lands in x later
	must("FreeAsync on A", p.FreeAsync(y, cuda.Stream(A)))
	must("StreamDestroy, without ForgetStream", dev.StreamDestroy(A))

	runtime.LockOSThread()
	must("StreamBeginCapture", dev.StreamBeginCapture(c, icuda.CaptureGlobal))
	ended := false
	endCapture := func() {
		t.Helper()
		if ended {
			return
		}
		ended = true
		g, err := dev.StreamEndCapture(c)
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatalf("the pool invalidated the user's capture: %v", err)
		}
		must("GraphDestroy", dev.GraphDestroy(g))
	}
	defer endCapture()
	t.Logf("Trim during the capture: %v", p.Trim()) // finds A refused; Recover is put off
	o.reclMu.Lock()
	refused := slices.Contains(o.lists.RefusedLost(nil), streamq.Stream(A))
	o.reclMu.Unlock()
	if !refused {
		t.Fatal("the reclaim did not find A's handle refused: the test proves nothing")
	}
	b, err := dev.StreamCreate(true)
	must("StreamCreate", err)
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
	must("Trim", p.Trim()) // Recover: the context synchronized, y back
	must("ForgetStream of b", p.ForgetStream(cuda.Stream(b)))
	must("StreamDestroy of b", dev.StreamDestroy(b))
	must("ForgetStream of c", p.ForgetStream(cuda.Stream(c)))
	must("StreamDestroy of c", dev.StreamDestroy(c))
	must("Free", p.Free(x))
	must("Free", p.Free(z))
	must("MemFree", dev.MemFree(d))
	must("Close", p.Close())
}
