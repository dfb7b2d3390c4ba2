package copyengine

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestStagingRingTakesAnIdleBuffer: with the ring full and its oldest buffer read by a launch
// still queued on one stream, a Copy on another stream takes a buffer whose launch has
// completed instead of waiting for the oldest. Before, it waited (cuEventSynchronize) for the
// launch on the other stream whenever the oldest buffer was busy, though the package doc
// says it waits only when all are in flight: a Copy blocked the host, and every other Copy
// behind the Batcher's mutex, until unrelated work on another stream had run.
func TestStagingRingTakesAnIdleBuffer(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, 2*maxStages*n, 2*maxStages*n)
	if f == nil {
		return
	}
	slow, fast := newStream(t, dev), newStream(t, dev)
	fill(mem.Bytes(host, 2*maxStages*n), 7)
	f.Hold(true)
	defer f.Hold(false)
	must(t, "Copy on the slow stream", b.Copy([]Job{mkJob(d, host, n)}, pcuda.Stream(slow)))
	for i := uintptr(1); i < maxStages; i++ {
		must(t, "Copy on the fast stream", b.Copy([]Job{mkJob(d+i*n, host+i*n, n)}, pcuda.Stream(fast)))
	}
	if len(b.stages) != maxStages {
		t.Fatalf("%d staging buffers after %d held launches, want %d", len(b.stages), maxStages, maxStages)
	}
	f.CompleteStream(fast) // the fast stream's launches are done; the slow one's is not
	last := uintptr(maxStages)
	must(t, "Copy with the oldest buffer busy", b.Copy([]Job{mkJob(d+last*n, host+last*n, n)}, pcuda.Stream(fast)))
	if err := dev.StreamQuery(slow); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("slow stream after a Copy on the fast stream found idle staging buffers: %v, want "+
			"not ready (the Copy waited for the slow stream's launch)", err)
	}
	if len(b.stages) != maxStages {
		t.Errorf("%d staging buffers, want %d", len(b.stages), maxStages)
	}
	f.Hold(false)
	f.Complete()
	if !bytes.Equal(mem.Bytes(d, (last+1)*n), mem.Bytes(host, (last+1)*n)) {
		t.Error("the batches did not move their bytes")
	}
}

// TestStagingGrowthFreesNothing: a batch too big for the staging buffer the ring hands out
// gets a bigger buffer without freeing the small one during Copy (it is freed by Close). Before,
// Copy freed it with cuMemFreeHost, which synchronizes the context and is one of the calls a
// capture forbids: the Copy waited for the work of every stream of the device, and while
// another stream captured a graph in the default (global) mode the free was refused, Copy
// failed with the driver's CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED on a stream that captured
// nothing, the other stream's capture was invalidated, and the buffer, already out of the
// ring, leaked (the fake's count of host allocations at the end of the test).
func TestStagingGrowthFreesNothing(t *testing.T) {
	const size = 1024
	f, dev, b, host, d := stagingRig(t, 8*minStageJobs*size, 8*minStageJobs*size)
	if f == nil {
		return
	}
	s, other := newStream(t, dev), newStream(t, dev)
	fill(mem.Bytes(host, 8*minStageJobs*size), 9)
	batch := func(jobs int) []Job { // jobs blocks of size bytes at the start of host and d
		out := make([]Job, jobs)
		for i := range out {
			out[i] = mkJob(d+uintptr(i)*size, host+uintptr(i)*size, size)
		}
		return out
	}
	must(t, "Copy of a small batch", b.Copy(batch(1), pcuda.Stream(s)))
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))

	// Unrelated work on another stream stays queued while the Copy grows its buffer.
	f.Hold(true)
	must(t, "MemcpyAsync on the other stream", dev.MemcpyAsync(uintptr(d)+7*minStageJobs*size, host, size, other))
	must(t, "Copy of a bigger batch", b.Copy(batch(2*minStageJobs), pcuda.Stream(s)))
	if err := dev.StreamQuery(other); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("the other stream after a Copy that grew its staging buffer: %v, want not ready "+
			"(the Copy waited for every stream of the device)", err)
	}
	f.Hold(false)
	must(t, "Synchronize", dev.Synchronize())

	// A capture in the global mode on another stream stays valid.
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(other, cuda.CaptureGlobal))
	err := b.Copy(batch(4*minStageJobs), pcuda.Stream(s))
	g, gerr := dev.StreamEndCapture(other)
	if err != nil {
		t.Errorf("Copy that grew its staging buffer while another stream captured: %v", err)
	}
	if gerr != nil || g == 0 {
		t.Errorf("the other stream's capture ended with graph %#x, %v; want a graph", g, gerr)
	} else {
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	if !bytes.Equal(mem.Bytes(d, 4*minStageJobs*size), mem.Bytes(host, 4*minStageJobs*size)) {
		t.Error("the batches did not move their bytes")
	}
}

// TestCloseRetriesRefusedFrees: a Close whose cuMemFreeHost of a staging buffer the driver
// refuses returns the refusal and keeps the buffer; the next Close frees it. Before, the
// Batcher was marked closed and its buffers dropped whatever the frees returned, so the
// second Close returned nil at once and the pinned memory leaked for the life of the process.
func TestCloseRetriesRefusedFrees(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	host, d := hostMem(t, dev, n), devMem(t, dev, n)
	hostAllocs := f.LiveObjects()["host allocs"]
	b := newBatcher(t, dev, Options{Method: MethodKernel})
	must(t, "Copy", b.Copy([]Job{mkJob(d, host, n)}, 0))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0))
	f.FailAfter(fakecuda.CallFreeHost, 0, fakecuda.ResultInvalidValue)
	if err := b.Close(); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("Close with its cuMemFreeHost refused: %v, want the driver's refusal", err)
	}
	must(t, "Close again", b.Close())
	if now := f.LiveObjects()["host allocs"]; now != hostAllocs {
		t.Errorf("%d host allocations after the second Close, want %d: a staging buffer leaked", now, hostAllocs)
	}
	if err := b.Copy([]Job{mkJob(d, host, n)}, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Copy after Close: %v, want ErrClosed", err)
	}
}

// TestBesideGlobalCapture: while the user's thread captures a graph in the default GLOBAL mode
// on another stream, a Batcher is made (its calibration allocates and frees device and pinned
// memory), copies with a staging buffer it grows, and closes, on other threads: its memory
// calls run in RELAXED mode, so none is refused and the capture stays valid. Before, the
// calibration's cuMemAlloc was refused (the Batcher fell back to an uncalibrated method) and
// Close's cuMemFreeHost too (the buffers kept, Close failing), each invalidating the capture.
func TestBesideGlobalCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, other := newStream(t, dev), newStream(t, dev)
	const size = 1024
	host, d := hostMem(t, dev, 2*minStageJobs*size), devMem(t, dev, 2*minStageJobs*size)
	jobs := make([]Job, 2*minStageJobs)
	for i := range jobs {
		jobs[i] = mkJob(d+uintptr(i)*size, host+uintptr(i)*size, size)
	}
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(other, cuda.CaptureGlobal))
	done := make(chan error)
	var calErr error
	go func() {
		b, err := New(public(dev), Options{})
		if err != nil {
			done <- err
			return
		}
		_, calErr = b.Calibration()
		err = errors.Join(b.Copy(jobs[:1], pcuda.Stream(s)), b.Copy(jobs, pcuda.Stream(s)),
			dev.StreamSynchronize(s))
		done <- errors.Join(err, b.Close())
	}()
	err := <-done
	g, gerr := dev.StreamEndCapture(other)
	if err != nil || calErr != nil {
		t.Errorf("New, Copy and Close beside a GLOBAL capture: %v (calibration: %v)", err, calErr)
	}
	if gerr != nil || g == 0 {
		t.Errorf("the user's capture ended with graph %#x, %v; want a graph", g, gerr)
	} else {
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}
}
