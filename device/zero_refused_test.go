package device

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeZeroOnFreeMemsetRefused: with Options.ZeroOnFree, a Free or FreeAsync whose memset
// the driver refuses (FailAfter: nothing queued), or a Free whose memset was queued and whose
// wait for it failed (the memset may still run), returns the driver's error, saying the block
// stays allocated, and frees nothing: the block is never handed out uncleared, and the same
// free again clears it and frees it, so that the next owner reads zero. Before, the error did
// not say what became of the block (the caller could take it as freed, and lose it).
func TestFakeZeroOnFreeMemsetRefused(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	for _, c := range []struct {
		what  string
		call  fakecuda.PinCall
		async bool
	}{
		{"a Free whose cuMemsetD8 is refused", fakecuda.CallMemset, false},
		{"a FreeAsync whose cuMemsetD8Async is refused", fakecuda.CallMemset, true},
		{"a Free whose wait for its memset fails", fakecuda.CallStreamSync, false},
	} {
		must(t, "HtoD", h.HtoD(pcuda.DevicePtr(p), pattern(n, 0x3C)))
		free := func() error {
			if c.async {
				return h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a))
			}
			return h.Free(pcuda.DevicePtr(p))
		}
		f.Hold(true) // a memset queued stays queued until its stream is synchronized
		f.FailAfter(c.call, 0, fakecuda.ResultInvalidValue)
		if err := free(); !errors.Is(err, pcuda.ErrInvalidValue) ||
			strings.Count(err.Error(), "the block stays allocated") != 1 {
			t.Errorf("%s = %v, want an error matching cuda.ErrInvalidValue that says the "+
				"block stays allocated", c.what, err)
		}
		if st := h.Stats(); st.Live != 1 || st.Deferred != 0 {
			t.Errorf("after %s: %d live, %d deferred; want 1 (the block), 0",
				c.what, st.Live, st.Deferred)
		}
		must(t, "Verify", h.Verify())
		q := alloc(t, h, n, a)
		if q == p {
			t.Errorf("after %s: the next Alloc got the block, uncleared", c.what)
		}
		f.Hold(false)
		must(t, "free again", free())
		must(t, "Free", h.Free(pcuda.DevicePtr(q)))
		must(t, "Sync", h.Sync())
		x, y := alloc(t, h, n, a), alloc(t, h, n, a) // the block and q, in some order
		if x != p && y != p {
			t.Fatalf("after %s and the free again: Allocs got %#x, %#x, not the block %#x",
				c.what, x, y, p)
		}
		must(t, "StreamSynchronize", dev.StreamSynchronize(a)) // a's clears, before the reads
		for _, r := range []cuda.DevicePtr{x, y} {
			got := make([]byte, n)
			must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(r)))
			if !bytes.Equal(got, make([]byte, n)) {
				t.Errorf("after %s and the free again: the next owner of %#x reads the "+
					"last one's bytes", c.what, r)
			}
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(x^y^p))) // the other
	}
	freeAll(t, h, []cuda.DevicePtr{p})
}

// TestFakeZeroOnFreeHeldMemsetRefused: with Options.ZeroOnFree, the Free of a held block whose
// memset the driver refuses at the last Release (FailAfter), or whose wait for its memset fails
// there (the memset queued may still run), is parked, not lost nor made: the block stays live
// and is not handed out. A Sync or Trim whose first settle's clear is refused again clears it
// and frees it at its second settle, and returns no error: nothing waits any more. The next
// owner reads zero. Before, that Sync or Trim returned the first settle's refusal ("the free
// ... waits") for a free it had made.
func TestFakeZeroOnFreeHeldMemsetRefused(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, a)
	for _, c := range []struct {
		what string
		call fakecuda.PinCall
		trim bool // the settle is Trim's, not Sync's
	}{
		{"its cuMemsetD8 refused", fakecuda.CallMemset, false},
		{"its wait for the memset failed", fakecuda.CallStreamSync, false},
		{"its cuMemsetD8 refused", fakecuda.CallMemset, true},
		{"its wait for the memset failed", fakecuda.CallStreamSync, true},
	} {
		settle, how := h.Sync, "Sync"
		if c.trim {
			settle, how = h.Trim, "Trim"
		}
		must(t, "HtoD", h.HtoD(pcuda.DevicePtr(p), pattern(n, 0x6E)))
		hd, err := h.Hold(pcuda.DevicePtr(p))
		must(t, "Hold", err)
		must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
		f.Hold(true) // a memset queued stays queued until a synchronize
		f.FailAfter(c.call, 0, fakecuda.ResultInvalidValue)
		must(t, "Release", hd.Release())
		if st := h.Stats(); st.Live != 1 || st.Deferred != 1 {
			t.Errorf("after the last Release, %s: %d live, %d deferred; want 1, 1 (parked)",
				c.what, st.Live, st.Deferred)
		}
		must(t, "Verify", h.Verify())
		q := alloc(t, h, n, a)
		if q == p {
			t.Errorf("after the last Release, %s: the next Alloc got the block", c.what)
		}
		f.Hold(false)
		// Sync and Trim settle the parked frees twice (before and after their drain): the
		// first settle's clear refused, the second clears the block and frees it.
		f.FailAfter(fakecuda.CallMemset, 0, fakecuda.ResultInvalidValue)
		if err := settle(); err != nil {
			t.Errorf("%s with the first clear refused, %s at the Release: %v; want nil "+
				"(the free made)", how, c.what, err)
		}
		if st := h.Stats(); st.Live != 1 || st.Deferred != 0 {
			t.Errorf("after %s: %d live, %d deferred; want 1 (q), 0", how, st.Live, st.Deferred)
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(q)))
		x, y := alloc(t, h, n, a), alloc(t, h, n, a) // the block and q, in some order
		if x != p && y != p {
			t.Fatalf("after %s and %s: Allocs got %#x, %#x, not the block %#x",
				c.what, how, x, y, p)
		}
		got := make([]byte, n)
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(p)))
		if !bytes.Equal(got, make([]byte, n)) {
			t.Errorf("after %s and %s: the next owner reads the last one's bytes", c.what, how)
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(x^y^p))) // the other
	}
	freeAll(t, h, []cuda.DevicePtr{p})
}
