package cudamem_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeZallocNotStartedFreed: a heap's Zalloc whose clear the driver refuses before anything
// was queued, on a healthy context (FailAfter), frees its block at once: the provider's first
// clear with its stream's cuStreamCreate refused, a later one with its cuMemsetD8Async refused.
// Each error matches arena.ErrNotStarted and the driver's code, the heap sets nothing aside
// (Stats.Uncleared 0), the next Alloc gets the block, the next Zalloc clears it on one stream,
// and at Close every driver resource is given back.
func TestFakeZallocNotStartedFreed(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	before := make([]int64, len(fakecuda.Live))
	for i, s := range fakecuda.Live {
		before[i] = f.Stat(s)
	}
	for _, pr := range providersOf(d, "DeviceMalloc", "DeviceVMM", "Managed") {
		p, err := pr.new()
		must(t, pr.name, err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
		must(t, "arena.New", err)
		h, err := heap.New(a, heap.Options{})
		must(t, "heap.New", err)
		b, err := h.Alloc(n)
		must(t, "Alloc", err)
		must(t, "Free", h.Free(b))
		refused := func(what string, err error, code error) {
			t.Helper()
			if !errors.Is(err, arena.ErrNotStarted) || !errors.Is(err, code) {
				t.Errorf("%s: Zalloc with %s = %v, want arena.ErrNotStarted and %v",
					pr.name, what, err, code)
			}
			if st := h.Stats(); st.Uncleared != 0 || st.Live != 0 {
				t.Errorf("%s: after %s: Uncleared %d, Live %d; want 0, 0 (freed)",
					pr.name, what, st.Uncleared, st.Live)
			}
			if q, err := h.Alloc(n); err != nil || q != b {
				t.Errorf("%s: Alloc after %s = %#x, %v; want the block, %#x",
					pr.name, what, q, err, b)
			} else {
				must(t, "Free", h.Free(q))
			}
			if n := f.Pending(); n != 0 {
				t.Errorf("%s: after %s: %d streams with work pending, want 0", pr.name, what, n)
			}
		}

		streams := f.Stat(fakecuda.Streams)
		f.FailAfter(fakecuda.CallStreamCreate, 0, fakecuda.ResultOutOfMemory)
		_, err = h.Zalloc(n) // the provider's first clear: its stream made now, refused
		refused("its stream's cuStreamCreate refused", err, pinmalloc.ErrOutOfMemory)
		if k, c := f.Stat(fakecuda.Streams), p.Counters(); k != streams || c.Streams != 0 {
			t.Errorf("%s: after the refused cuStreamCreate: %d streams (%d before), the "+
				"provider counts %d; want no new one", pr.name, k, streams, c.Streams)
		}

		b2, err := h.Zalloc(n) // a stream made, kept
		must(t, "Zalloc", err)
		if b2 != b {
			t.Fatalf("%s: Zalloc got %#x, want the block freed, %#x", pr.name, b2, b)
		}
		must(t, "Free", h.Free(b))
		f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue)
		_, err = h.Zalloc(n)
		refused("its cuMemsetD8Async refused", err, pinmalloc.ErrInvalidValue)
		b2, err = h.Zalloc(n) // on the stream kept: the refusal queued nothing there
		must(t, "Zalloc after the refused memset", err)
		must(t, "Free", h.Free(b2))
		if k, c := f.Stat(fakecuda.Streams), p.Counters(); k != streams+1 || c.Streams != 1 {
			t.Errorf("%s: after the refused memset and a clear: %d streams (%d before), the "+
				"provider counts %d; want one, kept", pr.name, k, streams, c.Streams)
		}

		must(t, "heap.Close", h.Close())
		must(t, "arena.Close", a.Close())
		if c := p.Counters(); c.Live() != 0 {
			t.Errorf("%s: after Close the provider counts %+v", pr.name, c)
		}
		for i, s := range fakecuda.Live {
			if k := f.Stat(s); k != before[i] {
				t.Errorf("%s: after Close the fake's live count %d is %d, want %d",
					pr.name, s, k, before[i])
			}
		}
	}
}
