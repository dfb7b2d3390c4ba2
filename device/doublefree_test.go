package device

import (
	"bytes"
	"errors"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeCrossStreamDoubleFree: a FreeAsync on another stream of a block already freed (on
// its own stream, or with Free) must fail with heap.ErrDoubleFree at once. It used to be
// deferred, unchecked (FreeAsync checked liveness on the same-stream path only): the block's
// own stream reused it meanwhile (b is kept busy, so the stray free waits), and the deferred
// free, done once b passed it, freed the new owner's live block, which the next Alloc handed
// out again: two owners of one block, the first's bytes overwritten by the second. (With b
// idle, the next Alloc's poll did the stray free and that Alloc failed with ErrDoubleFree.)
func TestFakeCrossStreamDoubleFree(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	b := newStream(t, dev, h)
	const n = 4096
	x := alloc(t, h, n, b) // b's work, held, keeps b busy
	for _, how := range []string{"FreeAsync on its own stream", "Free"} {
		p := alloc(t, h, n, a)
		if how == "Free" {
			must(t, how, h.Free(pcuda.DevicePtr(p)))
		} else {
			must(t, how, h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
		}
		f.Hold(true)
		must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(x), 0, n, pcuda.Stream(b)))
		err := h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b))
		if errors.Is(err, heap.ErrDoubleFree) {
			f.Hold(false)
			f.Complete()
			continue
		}
		t.Errorf("after %s, FreeAsync on another stream = %v, want heap.ErrDoubleFree", how, err)
		q := alloc(t, h, n, a) // the block again, for a new owner
		f.Hold(false)
		f.Complete()
		must(t, "Sync", h.Sync()) // b has passed the stray free: done, it frees q
		r := alloc(t, h, n, a)
		want := pattern(n, 0x11)
		must(t, "HtoD q", h.HtoD(pcuda.DevicePtr(q), want))
		must(t, "HtoD r", h.HtoD(pcuda.DevicePtr(r), pattern(n, 0x77)))
		got := make([]byte, n)
		must(t, "DtoH q", h.DtoH(got, pcuda.DevicePtr(q)))
		if q == r || !bytes.Equal(got, want) {
			t.Errorf("after %s and the stray free: q %#x and r %#x both live, q's bytes overwritten by r's: %v", how, q, r, !bytes.Equal(got, want))
		}
		_ = h.Free(pcuda.DevicePtr(q))
		if q != r {
			_ = h.Free(pcuda.DevicePtr(r))
		}
	}
	freeAll(t, h, []cuda.DevicePtr{x})
}
