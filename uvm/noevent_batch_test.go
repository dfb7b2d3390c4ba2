package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestFakeNoEventRelease: a Release records an event on the user's stream; when the driver
// cannot make it (cuEventCreate refused), the error says so as a stream's check does:
// pinmalloc.ErrRefused, or pinmalloc.ErrOutOfMemory where memory ran out, with "no event", said
// once, and the use ends all the same (after a wait for the stream). Before, the error said "no
// event" but matched neither sentinel for a refusal other than out of memory ("uvm: release of
// ... on stream ...: no event: cuda: CUDA_ERROR_INVALID_VALUE: fake driver error; released after
// waiting for the stream": pinmalloc.ErrInvalidValue alone, as if the caller's arguments were bad).
func TestFakeNoEventRelease(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(pinmalloc.ErrOutOfMemory, pinmalloc.ErrRefused) {
		tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
		s := stream(t, dev)
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, c.Want) || err == nil || strings.Count(err.Error(), "no event") != 1 {
				t.Errorf("%s with cuEventCreate refused (%d) = %v; want %v saying \"no event\" once", what, c.Code, err, c.Want)
			}
		}
		var hs [2]uvm.Handle
		for i := range hs {
			h, err := tr.Alloc(64 * kib)
			must(t, err)
			_, err = tr.Acquire(h, s, uvm.Write)
			must(t, err)
			hs[i] = h
		}
		must(t, tr.Release(hs[0], s)) // makes the tier's first release event: none idle after
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		check("Release", tr.Release(hs[1], s))
		if err := tr.Release(hs[1], s); !errors.Is(err, uvm.ErrNotAcquired) {
			t.Errorf("Release again after the refused event: %v; want ErrNotAcquired (the use ended)", err)
		}
		must(t, tr.Sync())
		must(t, tr.Close())
	}
}

// TestFakeNoEventBatch: an eviction's batch whose event the driver cannot make says so, as
// TestFakeNoEventReleaseAndBatch's Release does (pinmalloc.ErrRefused, "no event"), and the
// Evict made again succeeds. Before: "uvm: eviction of 1 block (1 copied): cuda:
// CUDA_ERROR_INVALID_VALUE: fake driver error", matching pinmalloc.ErrInvalidValue alone.
func TestFakeNoEventBatch(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	h, err := tr.Alloc(64 * kib)
	must(t, err)
	_, err = tr.Acquire(h, s, uvm.Write)
	must(t, err)
	must(t, tr.Release(h, s))
	must(t, tr.Sync())
	f.FailAfter(fakecuda.CallEventCreate, 0, fakecuda.ResultInvalidValue)
	err = tr.Evict([]uvm.Handle{h})
	if !errors.Is(err, pinmalloc.ErrRefused) || err == nil || strings.Count(err.Error(), "no event") != 1 {
		t.Errorf("Evict with cuEventCreate refused = %v; want pinmalloc.ErrRefused saying \"no event\" once", err)
	}
	must(t, tr.Evict([]uvm.Handle{h}))
	must(t, tr.Sync())
}
