package copyengine

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestPerThreadStreamRefused: the per-thread default stream (CU_STREAM_PER_THREAD, handle 2)
// names the default stream of whichever OS thread makes a driver call, and a goroutine moves
// between threads from one call to the next: a launch and the staging event recorded after it
// could land on two streams (the buffer reused under the launch), and two batches on two
// threads' streams are not ordered. Copy refuses it with ErrInvalidStream before anything is
// queued, as package device and package pinned refuse it; before, it took it.
func TestPerThreadStreamRefused(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	host, d := hostMem(t, dev, 4096), devMem(t, dev, 4096)
	for _, m := range []Method{MethodKernel, MethodBatchAPI, MethodPerCopy} {
		b := newBatcher(t, dev, Options{Method: m, LowPriority: m == MethodKernel})
		calls := queuedWork(f)
		err := b.Copy([]Job{mkJob(d, host, 4096)}, pcuda.Stream(2))
		if !errors.Is(err, ErrInvalidStream) || !errors.Is(err, pinmalloc.ErrInvalidStream) {
			t.Errorf("%s: Copy on the per-thread default stream: %v, want ErrInvalidStream", m, err)
		}
		if now := queuedWork(f); now != calls {
			t.Errorf("%s: the refused Copy queued work", m)
		}
	}
}

// TestAnotherDevicesStreamRefused: a stream of another device is refused by Copy with
// ErrInvalidStream, whatever the method, before anything is queued, and the Batcher copies on
// its own device's streams after. Before, the kernel method failed with the driver's bare
// CUDA_ERROR_INVALID_HANDLE (no sentinel of the package), and the per-copy and batch methods
// queued the copies on the other device's stream: MethodAuto's answer hung on its calibration.
func TestAnotherDevicesStreamRefused(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	dev, dev1 := f.Open(t, 0), f.Open(t, 1)
	const n = 4096
	src, dst := hostMem(t, dev, n), hostMem(t, dev, n)
	fill(mem.Bytes(src, n), 7)
	s0, s1 := newStream(t, dev), newStream(t, dev1)
	for _, o := range []Options{{Method: MethodKernel}, {Method: MethodKernel, LowPriority: true},
		{Method: MethodBatchAPI}, {Method: MethodPerCopy}, {Method: MethodAuto}} {
		b := newBatcher(t, dev, o)
		clear(mem.Bytes(dst, n))
		calls := queuedWork(f)
		err := b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(s1))
		if !errors.Is(err, ErrInvalidStream) || !errors.Is(err, pinmalloc.ErrInvalidStream) {
			t.Errorf("%+v: Copy on device 1's stream: %v, want ErrInvalidStream", o, err)
		} else if !strings.Contains(err.Error(), "device 0") {
			t.Errorf("%+v: Copy on device 1's stream: %q does not name the Batcher's device", o, err)
		}
		if now := queuedWork(f); now != calls {
			t.Errorf("%+v: the refused Copy queued work", o)
		}
		must(t, "StreamSynchronize on device 1", dev1.StreamSynchronize(s1))
		if !bytes.Equal(mem.Bytes(dst, n), make([]byte, n)) {
			t.Errorf("%+v: the refused Copy copied", o)
		}
		must(t, "Copy on device 0's stream", b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(s0)))
		must(t, "StreamSynchronize", dev.StreamSynchronize(s0))
		if !bytes.Equal(mem.Bytes(dst, n), mem.Bytes(src, n)) {
			t.Errorf("%+v: the Copy on device 0's stream after the refused one did not copy", o)
		}
	}
}

// TestReusedStreamHandleOfAnotherDevice: a stream the Batcher accepted, destroyed, whose handle
// the driver gives to a new stream of another device, is refused at its next Copy with
// ErrInvalidStream: the Batcher's memory of the stream it checked last does not outlive a
// stream destroyed through package cuda.
func TestReusedStreamHandleOfAnotherDevice(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	f.SetDevices(2)
	dev, dev1 := f.Open(t, 0), f.Open(t, 1)
	const n = 4096
	src, dst := hostMem(t, dev, n), hostMem(t, dev, n)
	b := newBatcher(t, dev, Options{Method: MethodPerCopy})
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	must(t, "Copy", b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(s)))
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	must(t, "StreamDestroy", dev.StreamDestroy(s))
	s1, err := dev1.StreamCreate(true)
	must(t, "StreamCreate on device 1", err)
	defer func() { must(t, "StreamDestroy", dev1.StreamDestroy(s1)) }()
	if s1 != s {
		t.Fatalf("device 1's new stream %#x did not get the destroyed stream's handle %#x", s1, s)
	}
	calls := f.Memcpys()
	if err := b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(s1)); !errors.Is(err, ErrInvalidStream) {
		t.Errorf("Copy on device 1's stream of a handle device 0's stream had: %v, want ErrInvalidStream", err)
	}
	if f.Memcpys() != calls {
		t.Error("the refused Copy queued work")
	}
}

// TestStreamCheckedOnce: Copy asks the driver a stream's context (cuStreamGetCtx) the first
// time it is given the stream, not at every Copy on it, and again once a stream was destroyed
// (whose handle the driver may give to another device's stream). The legacy stream is not
// asked about.
func TestStreamCheckedOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	src, dst := hostMem(t, dev, n), hostMem(t, dev, n)
	b := newBatcher(t, dev, Options{Method: MethodPerCopy})
	s := newStream(t, dev)
	asks := f.Stat(fakecuda.StreamContextAsks)
	copies := func(s cuda.Stream, k int) {
		t.Helper()
		for range k {
			must(t, "Copy", b.Copy([]Job{mkJob(dst, src, n)}, pcuda.Stream(s)))
		}
	}
	copies(s, 3)
	if got := f.Stat(fakecuda.StreamContextAsks) - asks; got != 1 {
		t.Errorf("3 Copies on one stream asked its context %d times, want 1", got)
	}
	s2 := newStream(t, dev)
	for range 3 { // two streams in turn: each asked once
		copies(s2, 1)
		copies(s, 1)
	}
	if got := f.Stat(fakecuda.StreamContextAsks) - asks; got != 2 {
		t.Errorf("Copies on two streams in turn asked %d times in all, want 2", got)
	}
	copies(0, 2)
	if got := f.Stat(fakecuda.StreamContextAsks) - asks; got != 2 {
		t.Errorf("Copies on the legacy stream asked a context %d times", got-2)
	}
	other, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	must(t, "StreamDestroy", dev.StreamDestroy(other))
	copies(s, 2)
	if got := f.Stat(fakecuda.StreamContextAsks) - asks; got != 3 {
		t.Errorf("2 Copies on the stream after another's destroy made %d asks in all, want 3", got)
	}
	must(t, "StreamSynchronize", dev.StreamSynchronize(s2))
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0))
}

// queuedWork counts what the fake was asked to queue: launches, batches, copies and event
// records (a refused Copy adds none).
func queuedWork(f *fakecuda.Driver) int64 {
	return f.Launches() + f.Batches() + f.Memcpys() + f.Stat(fakecuda.EventRecords)
}
