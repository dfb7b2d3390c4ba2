package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestReleaseOnDestroyedStreamAfterFault: Release of a block acquired on a stream the user
// destroyed (without ForgetStream), after a kernel faulted (the context's sticky error: the
// driver refuses the release event and every wait), ends the use and says that the device
// failed (uvm.ErrDeviceFault, of kind pinmalloc.ErrDeviceFault, the driver's error in the chain):
// the tier could wait for neither the stream nor the device, and the stream is not the cause.
// Free of a block still acquired there says the same, and that its memory is held back. Before,
// both said uvm.ErrInvalidStream, which sent the user looking for a bad stream in a context
// that runs no more work. A stream the driver refuses while the device still waits is still
// ErrInvalidStream (TestReleaseOnDestroyedStream).
func TestReleaseOnDestroyedStreamAfterFault(t *testing.T) { releaseAfterFault(t, true) }

// TestReleaseAfterFault is TestReleaseOnDestroyedStreamAfterFault on a stream the user did not
// destroy: the driver refuses the release event for the fault alone (before the fake refused
// event records after a fault, Release recorded it and said nothing of the fault, unlike a
// GPU).
func TestReleaseAfterFault(t *testing.T) { releaseAfterFault(t, false) }

func releaseAfterFault(t *testing.T, destroyed bool) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	what := "a live stream"
	if destroyed {
		what = "a stream the user destroyed"
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 2, 64*kib)
	var s pcuda.Stream
	if destroyed {
		raw, err := dev.StreamCreate(true)
		must(t, err)
		s = pcuda.Stream(raw)
	} else {
		s = stream(t, dev)
	}
	for _, h := range hs {
		_, err := tr.Acquire(h, s, uvm.Read)
		must(t, err)
	}
	if destroyed {
		must(t, dev.StreamDestroy(uintptr(s)))
	}
	f.Fault(t, dev)
	fault := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, uvm.ErrDeviceFault) || !errors.Is(err, pinmalloc.ErrDeviceFault) || errors.Is(err, uvm.ErrInvalidStream) {
			t.Errorf("%s on %s after a kernel faulted: %v; want uvm.ErrDeviceFault, not uvm.ErrInvalidStream", op, what, err)
		}
		if code, _ := pcuda.ResultCode(err); code != fakecuda.ResultIllegalAddress {
			t.Errorf("%s on %s after a kernel faulted: %v; want the driver's CUDA_ERROR_ILLEGAL_ADDRESS in the chain", op, what, err)
		}
		if n := strings.Count(err.Error(), uvm.ErrDeviceFault.Error()); n != 1 {
			t.Errorf("%s on %s after a kernel faulted: %v; want the device's failure said once", op, what, err)
		}
	}
	err := tr.Release(hs[0], s)
	fault("Release", err)
	if n := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
		t.Errorf("Release on %s after a kernel faulted: %v; want the driver's error said once", what, err)
	}
	if err := tr.Release(hs[0], s); !errors.Is(err, uvm.ErrNotAcquired) {
		t.Errorf("a second Release on %s: %v; want uvm.ErrNotAcquired (the first ended the use)", what, err)
	}
	err = tr.Free(hs[1])
	fault("Free", err)
	if !errors.Is(err, uvm.ErrHeldBack) {
		t.Errorf("Free on %s after a kernel faulted: %v; want uvm.ErrHeldBack too", what, err)
	}
}

// TestAcquireAfterFault: Acquire and Prefetch on a stream the tier has not seen, after a kernel
// faulted, change nothing and say the device failed (uvm.ErrDeviceFault, the driver's error in the
// chain), not that the stream is invalid: the driver refuses the point that checks the stream for
// the context's error, not the stream's. Before, both said uvm.ErrInvalidStream. A handle the
// driver does not know, with no fault, is still ErrInvalidStream (TestAcquireChecksStream).
func TestAcquireAfterFault(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 * kib})
	hs := filled(t, tr, 1, 64*kib)
	s := stream(t, dev)
	f.Fault(t, dev)
	_, err := tr.Acquire(hs[0], s, uvm.Read)
	for op, err := range map[string]error{"Acquire": err, "Prefetch": tr.Prefetch(hs, s)} {
		if !errors.Is(err, uvm.ErrDeviceFault) || errors.Is(err, uvm.ErrInvalidStream) {
			t.Errorf("%s on a new stream after a kernel faulted: %v; want uvm.ErrDeviceFault, not uvm.ErrInvalidStream", op, err)
		}
		if code, _ := pcuda.ResultCode(err); code != fakecuda.ResultIllegalAddress || strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS") != 1 {
			t.Errorf("%s on a new stream after a kernel faulted: %v; want the driver's CUDA_ERROR_ILLEGAL_ADDRESS in the chain, said once", op, err)
		}
	}
	if st := tr.Stats(); st.AcquiredBlocks != 0 {
		t.Errorf("after the refused Acquire and Prefetch: %d blocks acquired, want none", st.AcquiredBlocks)
	}
}
