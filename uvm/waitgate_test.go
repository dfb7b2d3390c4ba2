package uvm_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestPrefetchHoldsCaptureGate: Prefetch checks that no capture holds its stream before the
// restore, then queues the stream's wait for the batch. A capture begun on the stream between
// the two (here, while the copy after the check is paused) must not get the wait: it would be
// a node of the user's graph, and the driver refuses a wait for an event recorded outside the
// capture and invalidates the capture. Before, Prefetch queued the wait with no second look and
// no capture gate: the capture began, the wait invalidated it (CUDA_ERROR_STREAM_CAPTURE_
// ISOLATION) and its end gave no graph. Now the wait is checked again in the gate: refused with
// ErrCapturing, the capture intact.
func TestPrefetchHoldsCaptureGate(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 2, 64*kib)
	acquireAll(t, tr, s, uvm.Read, hs) // s known: Prefetch asks it nothing more
	must(t, tr.Evict(hs[:1]))          // on the host: Prefetch restores it
	th := fakecuda.LockedThread(t)
	must(t, f.PauseAfterCaptureCheck(dev)) // Prefetch's check of s, before the restore
	prefetched := make(chan error, 1)
	go func() { prefetched <- tr.Prefetch(hs[:1], s) }()
	_, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(uintptr(s), icuda.CaptureRelaxed) })
	err := <-prefetched
	must(t, begun())
	eerr := endCaptureOn(th, dev, uintptr(s))
	if eerr != nil {
		t.Errorf("a capture begun during a Prefetch, before its wait: %v, want a graph (Prefetch: %v)", eerr, err)
	}
	if err != nil && !errors.Is(err, cuda.ErrCapturing) {
		t.Errorf("Prefetch while a capture began on its stream: %v, want nil or ErrCapturing", err)
	}
	p, err := tr.Acquire(hs[0], s, uvm.Read)
	must(t, err)
	if !bytes.Equal(readDev(t, dev, s, p, 64*kib), pattern(0, 64*kib)) {
		t.Error("the block prefetched while a capture began holds other bytes")
	}
	must(t, tr.Release(hs[0], s))
}

// TestAcquireRefusedWaitHoldsGateOnce: an Acquire whose wait the driver refuses as an invalid
// handle (the stream destroyed without ForgetStream) lets go of the stream (refusedStream),
// which asks the driver about it in the capture gate. Before, the Acquire did so with the gate
// still held from its check and its wait: a second hold by the same goroutine, which a capture's
// begin waiting between the two turns into a deadlock (sync.RWMutex lets no new hold in while a
// writer waits). Here a capture begins on another stream while the wait is paused, the stream
// destroyed meanwhile; the Acquire must end, with ErrInvalidStream, and the capture begin.
func TestAcquireRefusedWaitHoldsGateOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s1, s3 := stream(t, dev), stream(t, dev)
	h2, err := dev.StreamCreate(true) // destroyed by the test
	must(t, err)
	s2 := cuda.Stream(h2)
	hs := filled(t, tr, 2, 64*kib)
	acquireAll(t, tr, s2, uvm.Read, hs[1:]) // s2 known, and released on: forgetting it asks it
	acquireAll(t, tr, s1, uvm.Write, hs[:1])
	th := fakecuda.LockedThread(t)
	must(t, f.PauseAfterCaptureCheck(dev)) // the Acquire's check of s2, before its wait
	acquired := make(chan error, 1)
	go func() { _, err := tr.Acquire(hs[0], s2, uvm.Read); acquired <- err }()
	f.WaitPaused(t)
	must(t, dev.StreamDestroy(h2)) // the paused wait is refused
	_, begun := f.BeginDuringPause(t, th, func() error { return dev.StreamBeginCapture(uintptr(s3), icuda.CaptureRelaxed) })
	select {
	case err = <-acquired:
	case <-time.After(20 * time.Second):
		// The Acquire holds t.mu and the gate: nothing could clean up. Say so and stop.
		fmt.Fprintln(os.Stderr, "TestAcquireRefusedWaitHoldsGateOnce: the Acquire whose wait was refused did not return in 20 s: it holds the capture gate twice, a capture's begin waiting between (deadlock)")
		os.Exit(1)
	}
	must(t, begun())
	eerr := endCaptureOn(th, dev, uintptr(s3))
	must(t, eerr)
	if !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Acquire whose wait the driver refused (its stream destroyed): %v, want ErrInvalidStream", err)
	}
}

// TestReleaseNoEventDuringCapture: a Release whose event the driver cannot make (cuEventCreate
// refused) waits for its stream's work instead; while a capture holds the stream, that
// synchronize would end the user's capture (the driver refuses it and invalidates the capture).
// Before, the Release synchronized the stream unasked: the capture's end gave no graph. Now it
// is refused with ErrCapturing, the use goes on, and the Release made after the capture ends.
func TestReleaseNoEventDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 1, 64*kib)
	_, err := tr.Acquire(hs[0], s, uvm.Read)
	must(t, err)
	th := fakecuda.LockedThread(t)
	must(t, <-th(func() error { return dev.StreamBeginCapture(uintptr(s), icuda.CaptureRelaxed) }))
	f.FailAfter(fakecuda.CallEventCreate, 0, fakecuda.ResultOutOfMemory)
	rerr := tr.Release(hs[0], s)
	eerr := endCaptureOn(th, dev, uintptr(s))
	if eerr != nil {
		t.Errorf("a capture during a Release with no event: %v, want a graph (Release: %v)", eerr, rerr)
	}
	if !errors.Is(rerr, cuda.ErrCapturing) {
		t.Errorf("Release with no event while its stream captures: %v, want ErrCapturing", rerr)
	}
	must(t, tr.Release(hs[0], s)) // the use went on; the capture has ended
}

// TestReleaseNoEventOnLegacyStream: a Release on the legacy default stream whose event the
// driver cannot make waits for that stream instead and ends the use; the stream is not
// refused (no ErrInvalidStream, no wait for the whole device). The wait must not need an event
// of its own, which the driver has just refused.
func TestReleaseNoEventOnLegacyStream(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 1, 64*kib)
	const legacy cuda.Stream = 0
	_, err := tr.Acquire(hs[0], legacy, uvm.Read)
	must(t, err)
	f.FailAfter(fakecuda.CallEventCreate, 0, fakecuda.ResultOutOfMemory)
	err = tr.Release(hs[0], legacy)
	if errors.Is(err, uvm.ErrInvalidStream) || !errors.Is(err, pinmalloc.ErrOutOfMemory) {
		t.Errorf("Release on the legacy stream with no event: %v; want the driver's out of memory, the stream not refused", err)
	}
	if err := tr.Release(hs[0], legacy); !errors.Is(err, uvm.ErrNotAcquired) {
		t.Errorf("a second Release after the use ended: %v, want ErrNotAcquired", err)
	}
}
