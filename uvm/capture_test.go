package uvm_test

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// beginCapture begins a CUDA graph capture on s; the goroutine stays on its OS thread, where
// the capture must end.
func beginCapture(t *testing.T, dev *icuda.Device, s cuda.Stream) {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	must(t, dev.StreamBeginCapture(uintptr(s), icuda.CaptureThreadLocal))
}

// endCapture ends the capture on s, which must still be valid: the tier invalidated nothing.
func endCapture(t *testing.T, dev *icuda.Device, s cuda.Stream) {
	t.Helper()
	g, err := dev.StreamEndCapture(uintptr(s))
	if err != nil || g == 0 {
		t.Fatalf("the user's capture ended with graph %#x, %v; want a graph", g, err)
	}
	must(t, dev.GraphDestroy(g))
}

// endCaptureOn ends the capture on s on th (fakecuda.LockedThread, where it began) and
// destroys its graph; the error is the end's when the capture was invalidated.
func endCaptureOn(th func(func() error) <-chan error, dev *icuda.Device, s uintptr) error {
	return <-th(func() error {
		g, err := dev.StreamEndCapture(s)
		if err == nil {
			err = dev.GraphDestroy(g)
		}
		return err
	})
}

// TestReleaseDuringCapture: a Release on a stream that captures a CUDA graph is refused with
// ErrCapturing, the use going on, and the capture stays valid; released after the capture
// ends, the block moves after the work queued on the stream before the capture. Before, the
// Release recorded the block's release event in the user's graph: the event then stood for no
// point of the stream's work, and the eviction's copy, ordered by it, read the block before the
// user's write to it ran.
func TestReleaseDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 2, 64*kib)
	p, err := tr.Acquire(hs[0], s, uvm.Write)
	must(t, err)
	writeDev(t, dev, s, p, pattern(42, 64*kib)) // queued on s before the capture, run late
	beginCapture(t, dev, s)
	records := f.Stat(fakecuda.EventRecords)
	err = tr.Release(hs[0], s)
	if !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Errorf("Release on a capturing stream: %v, want ErrCapturing", err)
	}
	if n := f.Stat(fakecuda.EventRecords) - records; n != 0 {
		t.Errorf("the refused Release recorded %d events", n)
	}
	endCapture(t, dev, s)
	if err != nil { // refused: the use went on
		must(t, tr.Release(hs[0], s))
	}
	evictedHolds(t, tr, hs[0], pattern(42, 64*kib), "the block was copied off the device before the write queued on its stream ran")
	must(t, tr.Close())
}

// TestAcquireDuringCapture: Acquire and Prefetch on a capturing stream are refused with
// ErrCapturing before anything is queued there when they would queue a wait (for the tier's
// copy, or for another stream's release: a node of the user's graph), and the capture stays
// valid; the Acquire of a block resident and ready for the stream queues nothing and asks the
// driver nothing (the hot path), capture or not. Before, the Acquire queued its wait for the
// release on another stream into the graph.
func TestAcquireDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s, other := stream(t, dev), stream(t, dev)
	hs := filled(t, tr, 4, 64*kib)
	_, err := tr.Acquire(hs[0], other, uvm.Write) // resident, last released on another stream
	must(t, err)
	must(t, tr.Release(hs[0], other))
	_, err = tr.Acquire(hs[1], s, uvm.Read) // resident, ready for s
	must(t, err)
	must(t, tr.Release(hs[1], s))
	must(t, tr.Evict(hs[2:])) // on the host
	must(t, tr.Sync())
	beginCapture(t, dev, s)
	waits := f.Stat(fakecuda.StreamWaits)
	for _, h := range []uvm.Handle{hs[0], hs[2]} {
		if _, err := tr.Acquire(h, s, uvm.Read); !errors.Is(err, pinmalloc.ErrCapturing) {
			t.Errorf("Acquire of %#x on a capturing stream: %v, want ErrCapturing", uint64(h), err)
			if err == nil {
				defer func() { must(t, tr.Release(h, s)) }()
			}
		}
	}
	if err := tr.Prefetch(hs[3:], s); !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Errorf("Prefetch on a capturing stream: %v, want ErrCapturing", err)
	}
	if n := f.Stat(fakecuda.StreamWaits) - waits; n != 0 {
		t.Errorf("the refused calls queued %d waits", n)
	}
	_, err = tr.Acquire(hs[1], s, uvm.Read) // queues nothing
	must(t, err)
	endCapture(t, dev, s)
	must(t, tr.Release(hs[1], s))
	_, err = tr.Acquire(hs[0], s, uvm.Read)
	must(t, err)
	must(t, tr.Release(hs[0], s))
	must(t, tr.Prefetch(hs[3:], s))
	must(t, tr.Close())
}

// TestFreeDuringCapture: the Free of a block acquired on a capturing stream is refused with
// ErrCapturing and frees nothing (its release event would be recorded in the user's graph);
// freed once the capture ends, it is. The capture stays valid.
func TestFreeDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 2, 64*kib)
	_, err := tr.Acquire(hs[0], s, uvm.Write)
	must(t, err)
	beginCapture(t, dev, s)
	records := f.Stat(fakecuda.EventRecords)
	err = tr.Free(hs[0])
	if !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Errorf("Free of a block acquired on a capturing stream: %v, want ErrCapturing", err)
	}
	if n := f.Stat(fakecuda.EventRecords) - records; n != 0 {
		t.Errorf("the refused Free recorded %d events", n)
	}
	must(t, tr.Free(hs[1])) // acquired nowhere: freed
	endCapture(t, dev, s)
	if err != nil {
		must(t, tr.Free(hs[0]))
	}
	must(t, tr.Close())
}

// elsewhere runs f on a goroutine of its own, and waits for it: not on the test's goroutine,
// whose OS thread a capture holds (beginCapture), so that the calls f makes are another
// thread's, which a thread-local capture does not refuse.
func elsewhere(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

// TestRecoverDuringCapture: a Sync that finds the tier's D2H stream refused (its batch in
// flight) answers it with a synchronize of the device only while no capture holds a stream the
// tier knows (one a block was acquired and released on): that synchronize would end the user's
// capture there (the driver refuses it, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and invalidates
// the capture). The batch stays in flight, the Sync says why (ErrCapturing), and the capture
// stays valid. Before, the tier's recovery (streamq's Lists.Recover) asked only its own streams
// and the legacy stream, synchronized the device, and the user's capture ended invalidated.
func TestRecoverDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 2, 64*kib)
	_, err := tr.Acquire(hs[0], s, uvm.Write)
	must(t, err)
	must(t, tr.Release(hs[0], s))
	recoverDuringCapture(t, f, dev, tr, hs[:1], s)
}

// TestRecoverDuringCaptureAfterPrune: the capture check before the device synchronize of a
// recovery asks every stream the tier has seen, also those its table of known streams pruned
// (past uvm's bound of streams known, each is checked again at its next use). Here the
// capturing stream is known to the tier only by the check of a Prefetch on it, and the streams
// of a thousand Prefetches since pruned it. Before, the check walked the table alone, missed
// the capture, and the recovery's synchronize ended it invalidated.
func TestRecoverDuringCaptureAfterPrune(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 2, 64*kib)
	w := stream(t, dev) // hs[0] written there, so that its eviction copies it
	_, err := tr.Acquire(hs[0], w, uvm.Write)
	must(t, err)
	must(t, tr.Release(hs[0], w))
	must(t, tr.Prefetch(hs[1:], s)) // s known by its check alone: no use, no release event
	for range uvm.MaxKnownStreams {
		must(t, tr.Prefetch(hs[1:], stream(t, dev)))
	}
	recoverDuringCapture(t, f, dev, tr, hs[:1], s)
}

// recoverDuringCapture evicts hs with the driver's work held, so that a batch is in flight on
// the tier's D2H stream, and destroys that stream under the tier: its work still runs, and the
// driver refuses its synchronize (no fault: the context works). It begins a capture on s and
// checks that Sync does not synchronize the device while s captures (the batch stays in flight,
// the capture ends valid), and does once the capture has ended.
func recoverDuringCapture(t *testing.T, f *fakecuda.Driver, dev *icuda.Device, tr *uvm.Tier,
	hs []uvm.Handle, s cuda.Stream) {
	t.Helper()
	must(t, tr.Sync())
	f.Hold(true)
	must(t, tr.Evict(hs)) // a batch in flight on the D2H stream
	if st := tr.Stats(); st.Pending == 0 {
		t.Fatal("no batch in flight after the eviction")
	}
	refuseD2H(t, dev, tr)
	t.Cleanup(func() { // before refuseD2H's
		f.Hold(false)
		f.Complete()
	})
	beginCapture(t, dev, s)
	var err error
	elsewhere(func() { err = tr.Sync() })
	if !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Errorf("Sync with the tier's stream refused, a user's stream capturing: %v; "+
			"want pinmalloc.ErrCapturing", err)
	}
	if st := tr.Stats(); st.Pending == 0 {
		t.Error("the batch on the refused stream finished while the user's stream captured")
	}
	endCapture(t, dev, s)
	must(t, tr.Sync()) // the capture over: the device synchronized, the batch finished
	if st := tr.Stats(); st.Pending != 0 {
		t.Errorf("after the capture and a Sync: %d batches in flight, want none", st.Pending)
	}
}

// TestSyncAfterFaultDuringCapture: a Sync after a kernel faulted, while a capture holds a
// stream the tier knows and a batch is in flight, says the device failed (ErrDeviceFault) and
// finishes nothing: the faulted context refuses every call, the capture check's and the
// capture's end too (as the real driver does), and no memory changes owner.
func TestSyncAfterFaultDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 2, 64*kib)
	_, err := tr.Acquire(hs[0], s, uvm.Write)
	must(t, err)
	must(t, tr.Release(hs[0], s))
	must(t, tr.Sync())
	f.Hold(true)
	defer f.Hold(false)
	must(t, tr.Evict(hs[:1])) // a batch in flight on the D2H stream
	before := tr.Stats()
	if before.Pending == 0 {
		t.Fatal("no batch in flight after the eviction")
	}
	beginCapture(t, dev, s)
	elsewhere(func() {
		f.Fault(t, dev)
		err = tr.Sync()
	})
	if !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Errorf("Sync after a kernel faulted, a user's stream capturing: %v; "+
			"want pinmalloc.ErrDeviceFault", err)
	}
	after := tr.Stats()
	if after.Pending != before.Pending || after.SpareBytes != before.SpareBytes {
		t.Errorf("the failed Sync gave the batch's memory on: %d batches in flight, "+
			"%d bytes of spare VRAM; want %d, %d",
			after.Pending, after.SpareBytes, before.Pending, before.SpareBytes)
	}
	if _, err := dev.StreamEndCapture(uintptr(s)); !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Errorf("the capture's end after the fault: %v; want the fault (the real driver's answer)", err)
	}
	f.ClearStickyError() // a context that works again, which a real one never does: to clean up
	if g, err := dev.StreamEndCapture(uintptr(s)); err == nil && g != 0 {
		must(t, dev.GraphDestroy(g))
	}
}

// TestSyncHeldBackDuringCapture: memory held back is given back by a Sync only after a
// synchronize of the device, which the Sync does not make while a capture holds a stream the
// tier knows (it would end that capture): the memory stays held back, the Sync says so
// (ErrHeldBack) and why (ErrCapturing), and the capture stays valid. Before, the Sync
// synchronized the device and the user's capture ended invalidated. The memory is held back
// without a fault (a faulted context refuses the capture's end too): the tier's D2H stream is
// destroyed under it, so that the Free can neither queue its waits there nor synchronize it.
func TestSyncHeldBackDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr, h, _, s := cleanBlock(t, dev, n) // acquired and released on s
	refuseD2H(t, dev, tr)
	ferr := tr.Free(h)
	if !errors.Is(ferr, uvm.ErrHeldBack) {
		t.Fatalf("Free with the tier's D2H stream refused: %v; want uvm.ErrHeldBack", ferr)
	}
	beginCapture(t, dev, s)
	var err error
	elsewhere(func() { err = tr.Sync() })
	if !errors.Is(err, uvm.ErrHeldBack) || !errors.Is(err, pinmalloc.ErrCapturing) {
		t.Errorf("Sync with memory held back, a user's stream capturing: %v; want uvm.ErrHeldBack and pinmalloc.ErrCapturing", err)
	}
	if st := tr.Stats(); st.HeldBackDeviceBytes != n {
		t.Errorf("after the Sync: %d bytes of VRAM held back, want %d", st.HeldBackDeviceBytes, n)
	}
	endCapture(t, dev, s)
	must(t, tr.Sync()) // the capture over: given back
	if st := tr.Stats(); st.HeldBackDeviceBytes != 0 || st.HeldBackHostBytes != 0 {
		t.Errorf("after the capture and a Sync: %d bytes of VRAM and %d of host buffers held back, want none", st.HeldBackDeviceBytes, st.HeldBackHostBytes)
	}
}

// refuseD2H destroys the tier's D2H stream under it, so that the driver refuses the waits
// queued there and its synchronize (no fault: the context works). At cleanup, before the
// tier's Close, the stream's handle goes to a new stream (the driver gives a destroyed
// stream's handle to the next one created), which the Close destroys.
func refuseD2H(t *testing.T, dev *icuda.Device, tr *uvm.Tier) {
	t.Helper()
	d2h := tr.D2HStream()
	must(t, dev.StreamDestroy(uintptr(d2h)))
	t.Cleanup(func() {
		raw, err := dev.StreamCreate(true)
		must(t, err)
		if raw != uintptr(d2h) {
			t.Errorf("the fake gave the new stream handle %#x, not the destroyed D2H stream's %#x", raw, d2h)
			must(t, dev.StreamDestroy(raw))
		}
	})
}

// TestReleaseOnDestroyedStreamDuringCapture: a Release (or Free) of a block acquired on a
// stream the user destroyed cannot record its event there, and would wait for the work queued
// there with a synchronize of the device; while a capture holds a stream the tier knows, that
// synchronize would end the capture, so the tier refuses the call with ErrCapturing instead:
// the use goes on (nothing freed), the capture stays valid, and the same call once the capture
// has ended waits for the device and ends the use (ErrInvalidStream, as without a capture). The
// block then moves with the bytes the destroyed stream's work wrote. Before, the Release and
// the Free synchronized the device, which ended the user's capture invalidated.
func TestReleaseOnDestroyedStreamDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 3, n)
	capt := stream(t, dev)
	acquireAll(t, tr, capt, uvm.Read, hs[2:]) // a stream the tier knows
	raw, err := dev.StreamCreate(true)
	must(t, err)
	dead := cuda.Stream(raw)
	p, err := tr.Acquire(hs[0], dead, uvm.Write)
	must(t, err)
	_, err = tr.Acquire(hs[1], dead, uvm.Read)
	must(t, err)
	f.Hold(true)
	writeDev(t, dev, dead, p, pattern(99, n)) // queued on the stream, run late
	must(t, dev.StreamDestroy(raw))
	beginCapture(t, dev, capt)
	var rerr, ferr error
	elsewhere(func() {
		rerr = tr.Release(hs[0], dead)
		ferr = tr.Free(hs[1])
	})
	for _, c := range []struct {
		op  string
		err error
	}{{"Release", rerr}, {"Free", ferr}} {
		if !errors.Is(c.err, pinmalloc.ErrCapturing) {
			t.Errorf("%s of a block acquired on a destroyed stream, a known stream capturing: %v; want pinmalloc.ErrCapturing", c.op, c.err)
		}
	}
	endCapture(t, dev, capt)
	f.Hold(false)
	if st := tr.Stats(); st.AcquiredBlocks != 2 {
		t.Errorf("after the refused calls: %d blocks acquired, want 2 (the uses go on)", st.AcquiredBlocks)
	}
	if err := tr.Release(hs[0], dead); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Release on the destroyed stream once the capture ended: %v; want uvm.ErrInvalidStream", err)
	}
	if err := tr.Release(hs[0], dead); !errors.Is(err, uvm.ErrNotAcquired) {
		t.Errorf("a second Release: %v; the one before should have ended the use", err)
	}
	if err := tr.Free(hs[1]); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Free of a block acquired on the destroyed stream once the capture ended: %v; want uvm.ErrInvalidStream", err)
	}
	evictedHolds(t, tr, hs[0], pattern(99, n), "the block moved before the destroyed stream's write to it ran")
	must(t, tr.Close())
}

// TestRefusedReleaseForgetsDeadStream: a Release refused for a capture (as in
// TestReleaseOnDestroyedStreamDuringCapture) has found that the driver no longer knows the
// stream, whose handle it may give to a stream created next, not ordered after the dead one's
// work: the release events recorded on the dead stream stop standing for the handle, so that a
// block released there, acquired on the new stream with that handle, is read there only after
// the dead stream's write to it. Before, the new stream took that release event for its own
// and waited for nothing: it read the block before the write.
func TestRefusedReleaseForgetsDeadStream(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 3, n)
	capt := stream(t, dev)
	acquireAll(t, tr, capt, uvm.Read, hs[2:])
	raw, err := dev.StreamCreate(true)
	must(t, err)
	dead := cuda.Stream(raw)
	p, err := tr.Acquire(hs[0], dead, uvm.Write)
	must(t, err)
	f.Hold(true)
	writeDev(t, dev, dead, p, pattern(99, n)) // queued on the stream, run late
	must(t, tr.Release(hs[0], dead))          // its release event, on the stream
	_, err = tr.Acquire(hs[1], dead, uvm.Read)
	must(t, err)
	must(t, dev.StreamDestroy(raw))
	beginCapture(t, dev, capt)
	var next cuda.Stream
	elsewhere(func() {
		if err := tr.Release(hs[1], dead); !errors.Is(err, pinmalloc.ErrCapturing) {
			t.Errorf("Release on the destroyed stream, a known stream capturing: %v; want pinmalloc.ErrCapturing", err)
		}
		raw, err := dev.StreamCreate(true)
		must(t, err)
		if next = cuda.Stream(raw); next != dead {
			t.Errorf("the fake gave the new stream handle %#x, not the destroyed stream's %#x", next, dead)
			return
		}
		q, err := tr.Acquire(hs[0], next, uvm.Read)
		must(t, err)
		if !bytes.Equal(readDev(t, dev, next, q, n), pattern(99, n)) {
			t.Error("a stream with the destroyed stream's handle read the block before the destroyed stream's write to it ran")
		}
		must(t, tr.Release(hs[0], next))
	})
	endCapture(t, dev, capt)
	f.Hold(false)
	if err := tr.Release(hs[1], dead); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Release on the destroyed stream once the capture ended: %v; want uvm.ErrInvalidStream", err)
	}
	must(t, tr.ForgetStream(next))
	must(t, dev.StreamDestroy(uintptr(next)))
	must(t, tr.Close())
}
