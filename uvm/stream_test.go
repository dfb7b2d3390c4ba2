package uvm_test

import (
	"bytes"
	"errors"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestAcquireChecksStream: Acquire checks the stream on a hit as on a miss (a block on the
// device was acquired on a bogus stream, whose Release then failed and left the block acquired
// for good); the check asks the driver once per stream: a hit or miss on a known stream costs
// no driver call.
func TestAcquireChecksStream(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	s := stream(t, dev)
	hs := filled(t, tr, 8, 64*kib) // twice the budget: Acquires miss too
	_, err := tr.Acquire(hs[0], s, uvm.Read)
	must(t, err)
	must(t, tr.Release(hs[0], s))
	must(t, tr.Sync()) // no restore pending: nothing but the check can refuse the stream
	if _, err := tr.Acquire(hs[0], 0xdead, uvm.Read); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Acquire of a block on the device, on a stream the driver does not know: %v", err)
	}
	if _, err := tr.Acquire(hs[7], 0xdead, uvm.Read); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Acquire of a block on the host, on a stream the driver does not know: %v", err)
	}
	q := tr.StreamChecks()
	st := tr.Stats()
	for round := range 3 {
		for _, h := range hs {
			for _, h := range []uvm.Handle{h, hs[0]} { // hs[0] stays hot: hits
				if _, err := tr.Acquire(h, s, uvm.Write); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				must(t, tr.Release(h, s))
			}
		}
	}
	after := tr.Stats()
	if n := tr.StreamChecks() - q; n != 0 {
		t.Errorf("%d Acquires (%d hits) on a known stream asked the driver about it %d times, want 0",
			6*len(hs), after.Hits-st.Hits, n)
	}
	if after.Hits == st.Hits || after.Misses == st.Misses {
		t.Errorf("hits %d -> %d, misses %d -> %d: the test wants both", st.Hits, after.Hits, st.Misses, after.Misses)
	}
	s2 := stream(t, dev)
	_, err = tr.Acquire(hs[0], s2, uvm.Read)
	must(t, err)
	must(t, tr.Release(hs[0], s2))
	if n := tr.StreamChecks() - q; n != 1 {
		t.Errorf("a new stream was checked %d times, want 1", n)
	}
	must(t, tr.Close())
}

// TestReleaseOnDestroyedStream: a block acquired on a stream that is then destroyed (without
// ForgetStream) is not wedged: Release cannot record its event there, so it waits for the
// device instead, ends the use and says so; the block moves again, with the bytes the
// destroyed stream's work wrote, and Close works. The tier forgets the stream: an Acquire on
// the dead handle is refused.
func TestReleaseOnDestroyedStream(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 2, 64*kib)
	s, err := dev.StreamCreate(true)
	must(t, err)
	p, err := tr.Acquire(hs[0], pcuda.Stream(s), uvm.Write)
	must(t, err)
	_, err = tr.Acquire(hs[1], pcuda.Stream(s), uvm.Read)
	must(t, err)
	writeDev(t, dev, pcuda.Stream(s), p, pattern(99, 64*kib)) // queued on s, run late
	must(t, dev.StreamDestroy(s))
	err = tr.Release(hs[0], pcuda.Stream(s))
	if !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Release on a destroyed stream: %v, want ErrInvalidStream", err)
	}
	if err2 := tr.Release(hs[0], pcuda.Stream(s)); !errors.Is(err2, uvm.ErrNotAcquired) {
		t.Errorf("a second Release: %v; the first (%v) should have released the block", err2, err)
	}
	evictedHolds(t, tr, hs[0], pattern(99, 64*kib), "the block moved before the destroyed stream's write to it ran")
	if _, err := tr.Acquire(hs[0], pcuda.Stream(s), uvm.Read); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Acquire on the destroyed stream after its failed Release: %v", err)
	}
	// Free of a block still acquired on the dead stream frees it (behind the device's work).
	if err := tr.Free(hs[1]); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Free of a block acquired on the destroyed stream: %v", err)
	}
	must(t, tr.Close())
}

// TestForgetStream: ForgetStream refuses while a block is acquired on the stream, then forgets
// it: the next Acquire on the handle asks the driver again (refused once the stream is
// destroyed), and blocks released there before move as usual, ordered by the events recorded
// on the stream before it was destroyed.
func TestForgetStream(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 2, 64*kib)
	s, err := dev.StreamCreate(true)
	must(t, err)
	p, err := tr.Acquire(hs[0], pcuda.Stream(s), uvm.Write)
	must(t, err)
	if err := tr.ForgetStream(pcuda.Stream(s)); !errors.Is(err, uvm.ErrAcquired) {
		t.Errorf("ForgetStream with a block acquired on the stream: %v", err)
	}
	f.Hold(true) // the write stays queued past the destroy
	writeDev(t, dev, pcuda.Stream(s), p, pattern(42, 64*kib))
	must(t, tr.Release(hs[0], pcuda.Stream(s)))
	must(t, tr.ForgetStream(pcuda.Stream(s)))
	must(t, tr.ForgetStream(pcuda.Stream(s))) // a stream the tier does not know: nothing to do
	q := tr.StreamChecks()
	_, err = tr.Acquire(hs[1], pcuda.Stream(s), uvm.Read) // forgotten: checked again
	must(t, err)
	must(t, tr.Release(hs[1], pcuda.Stream(s)))
	if n := tr.StreamChecks() - q; n != 1 {
		t.Errorf("an Acquire on a forgotten stream asked the driver %d times, want 1", n)
	}
	must(t, tr.ForgetStream(pcuda.Stream(s)))
	must(t, dev.StreamDestroy(s))
	f.Hold(false)
	if _, err := tr.Acquire(hs[0], pcuda.Stream(s), uvm.Read); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Acquire on a forgotten, destroyed stream: %v", err)
	}
	evictedHolds(t, tr, hs[0], pattern(42, 64*kib), "the block moved before the destroyed stream's write to it ran")
	must(t, tr.Close())
	if err := tr.ForgetStream(pcuda.Stream(s)); !errors.Is(err, uvm.ErrClosed) {
		t.Errorf("ForgetStream after Close: %v", err)
	}
}

// TestPerThreadStreamRefused: Acquire and Prefetch refuse the per-thread default stream
// (handle 2), as pinned.Pool and device.Heap do: a Release's event and a restore's wait would
// be recorded on the default stream of whichever OS thread makes the call.
func TestPerThreadStreamRefused(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 2, 64*kib)
	const perThread pcuda.Stream = 2
	if _, err := tr.Acquire(hs[0], perThread, uvm.Read); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Acquire on the per-thread default stream: %v, want ErrInvalidStream", err)
	}
	if err := tr.Prefetch(hs, perThread); !errors.Is(err, uvm.ErrInvalidStream) {
		t.Errorf("Prefetch on the per-thread default stream: %v, want ErrInvalidStream", err)
	}
	if st := tr.Stats(); st.AcquiredBlocks != 0 || st.DeviceBytes != 0 {
		t.Errorf("a refused stream moved blocks: %d pinned, %d bytes on the device", st.AcquiredBlocks, st.DeviceBytes)
	}
	must(t, tr.Close())
}

// TestFailedAcquireAfterRestoreStaysEvictable: an Acquire that brings a block back and then
// fails (here the user's stream, known to the tier, was destroyed without ForgetStream, so the
// wait on the restore's event is refused) leaves the block on the device, unacquired. It must
// then be in the policy: evictable, as the invariants say. Before the fix it was on the device
// and in no list, so its VRAM was held for good: Verify said so, and an Acquire that needed its
// room failed with ErrAllPinned although nothing but the caller's own block was acquired.
func TestFailedAcquireAfterRestoreStaysEvictable(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const size = 64 * kib
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 2 * size, ThrashLapse: -1})
	hs := filled(t, tr, 3, size)
	good := stream(t, dev)
	dead, err := dev.StreamCreate(true)
	must(t, err)
	// The tier learns the dead stream while it lives.
	_, err = tr.Acquire(hs[2], pcuda.Stream(dead), uvm.Read)
	must(t, err)
	must(t, tr.Release(hs[2], pcuda.Stream(dead)))
	must(t, tr.Evict(hs))
	must(t, dev.StreamDestroy(dead))
	if _, err := tr.Acquire(hs[0], pcuda.Stream(dead), uvm.Read); err == nil {
		t.Fatal("Acquire on a destroyed stream succeeded")
	}
	if err := tr.Verify(); err != nil {
		t.Errorf("after the failed Acquire: %v", err)
	}
	// hs[1] acquired: the budget's other half must come from hs[0], released and cold.
	p1, err := tr.Acquire(hs[1], good, uvm.Read)
	must(t, err)
	p2, err := tr.Acquire(hs[2], good, uvm.Read)
	if err != nil {
		t.Fatalf("Acquire with one block of two acquired and the other unused: %v", err)
	}
	for i, p := range []pcuda.DevicePtr{p1, p2} {
		if !bytes.Equal(readDev(t, dev, good, p, size), pattern(byte(i+1), size)) {
			t.Errorf("block %d: bytes differ", i+1)
		}
	}
	must(t, tr.Release(hs[1], good))
	must(t, tr.Release(hs[2], good))
	b, err := tr.AcquireHost(hs[0], uvm.Read)
	must(t, err)
	if !bytes.Equal(b, pattern(0, size)) {
		t.Error("block 0: bytes differ")
	}
	must(t, tr.ReleaseHost(hs[0]))

}
