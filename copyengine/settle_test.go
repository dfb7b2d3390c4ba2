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

// TestStagingRecordFails: a launch whose staging event cannot be recorded (cuEventRecord
// fails after cuLaunchKernel queued the kernel) is waited for before Copy returns the error.
// Before, the buffer was left marked idle with the kernel still queued: the next Copy wrote its
// jobs into it, and the failed launch, run later on its own stream, copied them again out of
// that stream's order; here it wrote a destination the next batch had already filled, with the
// bytes its source held by then.
func TestStagingRecordFails(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, 4*n, 2*n)
	if f == nil {
		return
	}
	s1, s2 := newStream(t, dev), newStream(t, dev)
	h1, h2 := mem.Bytes(host, n), mem.Bytes(host+n, n)
	fill(h1, 1)
	fill(h2, 2)
	want := bytes.Clone(h2)
	f.Hold(true)
	defer f.Hold(false)
	f.FailAfter(fakecuda.CallRecord, 0, fakecuda.ResultInvalidValue)
	if err := b.Copy([]Job{mkJob(d, host, n)}, pcuda.Stream(s1)); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Fatalf("Copy whose staging event fails to record: %v, want ErrInvalidValue", err)
	}
	must(t, "Copy of the next batch", b.Copy([]Job{mkJob(d+n, host+n, n)}, pcuda.Stream(s2)))
	must(t, "StreamSynchronize", dev.StreamSynchronize(s2))
	fill(h2, 3) // the next batch is done: its source is the caller's again
	must(t, "StreamSynchronize", dev.StreamSynchronize(s1))
	if !bytes.Equal(mem.Bytes(d+n, n), want) {
		t.Fatal("a launch whose staging event failed ran later with the next batch's jobs: it overwrote that batch's destination")
	}
}

// TestStagingRecordAndWaitsFail: a launch whose staging event cannot be recorded, and whose
// stream and context cannot be synchronized either (loseLaunch), leaves its staging buffer out
// of the ring: the next Copy writes its jobs into another, and Close frees it only once it can
// confirm the launch done, ending no capture it can see: it synchronizes the launch's stream
// while that does not capture, and returns ErrBusy, keeping the buffer for a later Close, while
// it does.
// Before, the buffer was left marked idle: the next Copy wrote its jobs into it under the queued
// kernel, which, run later on its own stream, copied them again out of that stream's order:
// here it wrote a destination the next batch had already filled, with the bytes its source held
// by then. And before Close waited for the launch's stream, it synchronized the context, which
// a capture on any stream refuses and invalidates: a user's RELAXED capture on another stream,
// or on the launch's own, ended with no graph (and Close said ErrBusy, the buffer kept).
func TestStagingRecordAndWaitsFail(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, 4*n, 2*n)
	if f == nil {
		return
	}
	s1, s2, sc := newStream(t, dev), newStream(t, dev), newStream(t, dev)
	h1, h2 := mem.Bytes(host, n), mem.Bytes(host+n, n)
	fill(h1, 1)
	fill(h2, 2)
	want := bytes.Clone(h2)
	f.Hold(true)
	defer f.Hold(false)
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	loseLaunch(t, f, dev, b, mkJob(d, host, n), s1)
	must(t, "Copy of the next batch", b.Copy([]Job{mkJob(d+n, host+n, n)}, pcuda.Stream(s2)))
	must(t, "StreamSynchronize", dev.StreamSynchronize(s2))
	fill(h2, 3) // the next batch is done: its source is the caller's again
	must(t, "StreamSynchronize", dev.StreamSynchronize(s1))
	if !bytes.Equal(mem.Bytes(d+n, n), want) {
		t.Fatal("a launch whose staging event failed, and could not be waited for, ran later with the next batch's jobs: it overwrote that batch's destination")
	}

	// A RELAXED capture on the launch's own stream: Close may neither synchronize it nor the
	// context. It frees all but the lost buffer, says so, and leaves the capture valid.
	end := captureOn(t, dev, s1, cuda.CaptureRelaxed)
	if err := b.Close(); !errors.Is(err, pinmalloc.ErrBusy) {
		t.Fatalf("Close while a capture holds the stream of a launch that may read a staging buffer: %v, want ErrBusy", err)
	}
	if err := end(); err != nil {
		t.Fatalf("a RELAXED capture on the lost launch's stream, across Close: %v, want a graph", err)
	}
	if len(b.lost) != 1 {
		t.Fatalf("%d lost staging buffers after a Close that could not confirm the launch done, want 1", len(b.lost))
	}

	// A RELAXED capture on another stream: Close synchronizes the launch's stream, frees the
	// lost buffer, and leaves the capture valid.
	end = captureOn(t, dev, sc, cuda.CaptureRelaxed)
	if err := b.Close(); err != nil {
		t.Fatalf("Close, while a RELAXED capture holds another stream, of a lost staging buffer whose launch's stream can be synchronized: %v", err)
	}
	if err := end(); err != nil {
		t.Fatalf("a RELAXED capture on another stream, across the Close that freed a lost staging buffer: %v, want a graph", err)
	}
	if len(b.lost) != 0 || len(b.retired) != 0 {
		t.Fatalf("after Close: %d lost and %d retired staging buffers kept, want none", len(b.lost), len(b.retired))
	}
	must(t, "Close again", b.Close())
}

// TestLostStageStreamDestroyed: a lost staging buffer (loseLaunch) whose launch's stream was
// destroyed since is confirmed free by a synchronize of the context, made only while no capture
// is visible: while a blocking stream captures (the legacy stream says so), Close returns
// ErrBusy and leaves the capture valid; once it ended, Close frees the buffer. Before, Close
// synchronized the context at once: refused, it invalidated the capture.
func TestLostStageStreamDestroyed(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, n, n)
	if f == nil {
		return
	}
	sb, err := dev.StreamCreate(false) // blocking: the legacy stream answers for its capture
	must(t, "StreamCreate", err)
	t.Cleanup(func() { must(t, "StreamDestroy", dev.StreamDestroy(sb)) })
	s1, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	f.Hold(true)
	defer f.Hold(false)
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	loseLaunch(t, f, dev, b, mkJob(d, host, n), s1)
	must(t, "StreamSynchronize", dev.StreamSynchronize(s1))
	must(t, "StreamDestroy", dev.StreamDestroy(s1))

	end := captureOn(t, dev, sb, cuda.CaptureRelaxed)
	if err := b.Close(); !errors.Is(err, pinmalloc.ErrBusy) {
		t.Fatalf("Close while a blocking stream captures, of a lost staging buffer whose launch's stream is destroyed: %v, want ErrBusy", err)
	}
	if err := end(); err != nil {
		t.Fatalf("a RELAXED capture on a blocking stream, across Close: %v, want a graph", err)
	}
	must(t, "Close once no capture is visible", b.Close())
	if len(b.lost) != 0 || len(b.retired) != 0 {
		t.Fatalf("after Close: %d lost and %d retired staging buffers kept, want none", len(b.lost), len(b.retired))
	}
}

// loseLaunch makes b lose a staging buffer (lose): the launch of job on s is queued, its staging
// event's record fails (FailAfter), and the waits for it, s's and the context's synchronizes,
// are refused by a GLOBAL capture of the calling thread (the stream's in that thread's mode:
// Device.StrictCapture; and runs nothing: the kernel is still queued). The capture is ended, and
// the thread must be locked (runtime.LockOSThread).
func loseLaunch(t *testing.T, f *fakecuda.Driver, dev *cuda.Device, b *Batcher, job Job, s cuda.Stream) {
	t.Helper()
	sc, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(sc)) }()
	end := captureOn(t, dev, sc, cuda.CaptureGlobal)
	dev.StrictCapture(true) // the stream's synchronize in this thread's GLOBAL mode: refused
	defer dev.StrictCapture(false)
	f.FailAfter(fakecuda.CallRecord, 0, fakecuda.ResultInvalidValue)
	err = b.Copy([]Job{job}, pcuda.Stream(s))
	dev.StrictCapture(false)
	if !errors.Is(err, pinmalloc.ErrInvalidValue) || !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Fatalf("Copy whose staging event fails to record, and whose waits are refused: %v, want ErrInvalidValue and the waits' ErrCapturing", err)
	}
	_ = end() // invalidated by the refused synchronizes
	if len(b.lost) != 1 {
		t.Fatalf("%d lost staging buffers after a launch no wait could confirm done, want 1", len(b.lost))
	}
}

// captureOn begins a capture on s in mode, on the calling thread (locked), and returns end,
// which ends it once (and at cleanup, if not before): nil where it returned a graph, else the
// driver's error (an invalidated capture).
func captureOn(t *testing.T, dev *cuda.Device, s cuda.Stream, mode cuda.CaptureMode) (end func() error) {
	t.Helper()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(s, mode))
	ended := false
	end = func() error {
		if ended {
			return nil
		}
		ended = true
		g, err := dev.StreamEndCapture(s)
		if err != nil {
			return err
		}
		must(t, "GraphDestroy", dev.GraphDestroy(g))
		return nil
	}
	t.Cleanup(func() { _ = end() })
	return end
}

// TestFenceBackFails: a batch moved on the Batcher's side stream (a LowPriority kernel, a
// batch-API batch on the legacy stream) whose fence back to the caller's stream cannot be
// queued is waited for before Copy returns the error. Before, it stayed queued on the side
// stream outside the caller's order, and ran after the caller's retry of the same copy on its
// own stream had written the destination: the failed batch overwrote the retry.
func TestFenceBackFails(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range []struct {
		name string
		o    Options
		s    func() cuda.Stream
		skip int // cuEventRecord calls that pass before the fence back's
	}{
		{"low-priority kernel", Options{Method: MethodKernel, LowPriority: true}, func() cuda.Stream { return newStream(t, dev) }, 2},
		{"legacy-stream batch", Options{Method: MethodBatchAPI}, func() cuda.Stream { return 0 }, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBatcher(t, dev, c.o)
			s := c.s()
			const n = 4096
			host, d := hostMem(t, dev, 2*n), devMem(t, dev, n)
			old, retry := mem.Bytes(host, n), mem.Bytes(host+n, n)
			fill(old, 4)
			fill(retry, 5)
			f.Hold(true)
			defer f.Hold(false)
			f.FailAfter(fakecuda.CallRecord, c.skip, fakecuda.ResultInvalidValue)
			if err := b.Copy([]Job{mkJob(d, host, n)}, pcuda.Stream(s)); !errors.Is(err, pinmalloc.ErrInvalidValue) {
				t.Fatalf("Copy whose fence back fails: %v, want ErrInvalidValue", err)
			}
			must(t, "the retry", dev.MemcpyAsync(uintptr(d), host+n, n, s))
			must(t, "StreamSynchronize", dev.StreamSynchronize(s))
			f.Hold(false)
			f.Complete() // whatever is still queued anywhere
			if !bytes.Equal(mem.Bytes(d, n), retry) {
				t.Fatal("the failed batch ran after the caller's retry on its stream and overwrote it")
			}
		})
	}
}

// newStream makes a stream destroyed at cleanup.
func newStream(t testing.TB, dev *cuda.Device) cuda.Stream {
	t.Helper()
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	t.Cleanup(func() { must(t, "StreamDestroy", dev.StreamDestroy(s)) })
	return s
}

// stagingRig runs the fake's device with a Batcher of the kernel method (its staging ring) and
// hostSize bytes of mapped host memory and devSize of device memory, all given back at the
// test's end; a nil fake where there is none.
func stagingRig(t *testing.T, hostSize, devSize uintptr) (f *fakecuda.Driver, dev *cuda.Device, b *Batcher, host uintptr, d cuda.DevicePtr) {
	t.Helper()
	if f, dev = fakecuda.RunDevice(t); f == nil {
		return nil, nil, nil, 0, 0
	}
	b = newBatcher(t, dev, Options{Method: MethodKernel})
	return f, dev, b, hostMem(t, dev, hostSize), devMem(t, dev, devSize)
}

// TestWaitRefusedKeepsOtherCapture: a launch whose staging event cannot be recorded, whose
// stream's synchronize the driver refuses for a capture (this thread's GLOBAL capture, the
// synchronize in the thread's own mode: Device.StrictCapture), is not waited for with a
// synchronize of the context, which any capture of the context refuses and ends: a user's
// RELAXED capture on another stream survives the failed Copy, and the buffer is lost (lose).
// Before, wait synchronized the context after the stream's refusal and ended that capture.
func TestWaitRefusedKeepsOtherCapture(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, n, n)
	if f == nil {
		return
	}
	s1, sr, sc := newStream(t, dev), newStream(t, dev), newStream(t, dev)
	f.Hold(true)
	defer f.Hold(false)
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	endRelaxed := captureOn(t, dev, sr, cuda.CaptureRelaxed)
	endGlobal := captureOn(t, dev, sc, cuda.CaptureGlobal)
	dev.StrictCapture(true) // the stream's synchronize in this thread's GLOBAL mode: refused
	f.FailAfter(fakecuda.CallRecord, 0, fakecuda.ResultInvalidValue)
	err := b.Copy([]Job{mkJob(d, host, n)}, pcuda.Stream(s1))
	dev.StrictCapture(false)
	if !errors.Is(err, pinmalloc.ErrInvalidValue) || !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Fatalf("Copy whose staging event fails to record, and whose wait is refused: %v, want ErrInvalidValue and ErrCapturing", err)
	}
	_ = endGlobal() // invalidated by the refused synchronize of s1 (the fake's stricter choice)
	if err := endRelaxed(); err != nil {
		t.Fatalf("a RELAXED capture on another stream, across a Copy whose wait was refused: %v, want a graph", err)
	}
	if len(b.lost) != 1 {
		t.Fatalf("%d lost staging buffers after a launch no wait could confirm done, want 1", len(b.lost))
	}
	must(t, "StreamSynchronize", dev.StreamSynchronize(s1))
	must(t, "Close", b.Close())
}

// TestWaitDestroyedStreamBesideCapture: a launch whose staging event cannot be recorded, whose
// stream the user destroyed before the wait for it (beforeWait), is waited for with a
// synchronize of the context only while no capture is visible: while a blocking stream
// captures (the legacy stream says so), the Copy fails with ErrCapturing, its staging buffer is
// lost (lose) and the capture stays valid. Before, wait synchronized the context, which the
// driver refused, ending the capture.
func TestWaitDestroyedStreamBesideCapture(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, n, n)
	if f == nil {
		return
	}
	sb, err := dev.StreamCreate(false) // blocking: the legacy stream answers for its capture
	must(t, "StreamCreate", err)
	t.Cleanup(func() { must(t, "StreamDestroy", dev.StreamDestroy(sb)) })
	s1, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	f.Hold(true)
	defer f.Hold(false)
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	end := captureOn(t, dev, sb, cuda.CaptureRelaxed)
	beforeWait = func(on pcuda.Stream) { must(t, "StreamDestroy", dev.StreamDestroy(uintptr(on))) }
	defer func() { beforeWait = nil }()
	f.FailAfter(fakecuda.CallRecord, 0, fakecuda.ResultInvalidValue)
	err = b.Copy([]Job{mkJob(d, host, n)}, pcuda.Stream(s1))
	beforeWait = nil
	if !errors.Is(err, pinmalloc.ErrInvalidValue) || !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Fatalf("Copy whose staging event fails to record, its stream destroyed, while a blocking stream captures: %v, want ErrInvalidValue and ErrCapturing", err)
	}
	if err := end(); err != nil {
		t.Fatalf("a RELAXED capture on a blocking stream, across a Copy whose stream was destroyed: %v, want a graph", err)
	}
	if len(b.lost) != 1 {
		t.Fatalf("%d lost staging buffers after a launch no wait could confirm done, want 1", len(b.lost))
	}
	must(t, "Close once no capture is visible", b.Close())
	if len(b.lost) != 0 || len(b.retired) != 0 {
		t.Fatalf("after Close: %d lost and %d retired staging buffers kept, want none", len(b.lost), len(b.retired))
	}
}
