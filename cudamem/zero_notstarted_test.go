package cudamem_test

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeZallocRefusedFreed: a heap's Zalloc whose cuMemsetD8Async the driver refuses (under
// the context's sticky error) queued nothing, so the clear's error says so
// (arena.ErrNotStarted) and the heap frees the block at once: not set aside, the next Alloc
// gets it. A clear whose wait fails (cuStreamSynchronize) may still run: its block is set aside
// until ReleaseUncleared, and the next Alloc gets another. Before, the refused memset's block
// was set aside too.
func TestFakeZallocRefusedFreed(t *testing.T) {
	f, d := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
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
		b2, err := h.Zalloc(n) // b again, cleared: its stream kept
		must(t, "Zalloc", err)
		if b2 != b {
			t.Fatalf("%s: Zalloc after a Free got %#x, want the block freed, %#x", pr.name, b2, b)
		}
		must(t, "Free", h.Free(b))

		unload := stickyFault(t, f, d)
		_, err = h.Zalloc(n)
		if !errors.Is(err, pinmalloc.ErrDeviceFault) || !errors.Is(err, arena.ErrNotStarted) {
			t.Errorf("%s: Zalloc with its memset refused = %v, want ErrDeviceFault and "+
				"arena.ErrNotStarted", pr.name, err)
		}
		if st := h.Stats(); st.Uncleared != 0 || st.Live != 0 {
			t.Errorf("%s: after the refused clear: Uncleared %d, Live %d; want 0, 0 (freed)",
				pr.name, st.Uncleared, st.Live)
		}
		if q, err := h.Alloc(n); err != nil || q != b {
			t.Errorf("%s: Alloc after the refused clear = %#x, %v; want the block, %#x",
				pr.name, q, err, b)
		} else {
			must(t, "Free", h.Free(q))
		}
		f.ClearStickyError()
		unload()

		f.FailAfter(fakecuda.CallStreamSync, 0, fakecuda.ResultInvalidValue)
		_, err = h.Zalloc(n)
		if !errors.Is(err, pinmalloc.ErrInvalidValue) || errors.Is(err, arena.ErrNotStarted) {
			t.Errorf("%s: Zalloc with its wait failed = %v, want ErrInvalidValue, not "+
				"arena.ErrNotStarted", pr.name, err)
		}
		if st := h.Stats(); st.Uncleared != 1 || st.UnclearedBytes != n {
			t.Errorf("%s: after the failed wait: Uncleared %d (%d bytes), want 1 (%d)",
				pr.name, st.Uncleared, st.UnclearedBytes, n)
		}
		q, err := h.Alloc(n)
		must(t, "Alloc", err)
		if q == b {
			t.Errorf("%s: Alloc after the failed wait got the block set aside, %#x", pr.name, b)
		}
		must(t, "Free", h.Free(q))
		f.Complete() // the failed clear's memset done
		if k := h.ReleaseUncleared(); k != 1 {
			t.Errorf("%s: ReleaseUncleared = %d, want 1", pr.name, k)
		}
		must(t, "heap.Close", h.Close())
		must(t, "arena.Close", a.Close())
		if n, c := f.Stat(fakecuda.Streams), p.Counters(); n != 0 || c.Live() != 0 {
			t.Errorf("%s: after Close: %d streams live, the provider counts %+v", pr.name, n, c)
		}
	}
}
