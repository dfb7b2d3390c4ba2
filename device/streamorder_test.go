package device

// Stream order under memory pressure: no memory of a stream heap changes owner (to the arena,
// another stream, or the provider through a decommit) before its stream has passed the work
// that may still use it. See "Stream order" in the package documentation.

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// pattern returns n bytes of a pattern of seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed ^ byte(i*7)
	}
	return b
}

// TestFakeSelfTrimKeepsStreamOrder is the reproducer of issue 25 (1): a 4 MiB heap (two
// segments), stream B holding one segment with a live block, stream A the other. A allocates
// a 128 KiB block, queues an HtoD copy into it and frees it on A (same stream: immediate). A's
// next Alloc finds the arena full. Before the fix the stream heap trimmed itself there
// (heap.fromArena called Trim even for a RetainSegments heap), handing its segment, with A's
// copy still queued, to the arena, and device's reclaim skipped the caller's stream; B then
// took the segment and wrote it, and A's stale copy landed on B's block when the streams ran.
func TestFakeSelfTrimKeepsStreamOrder(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 4 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	f.Hold(true)
	defer f.Complete()
	const n = 128 << 10
	held := alloc(t, h, 8<<10, b) // B's segment
	pa := alloc(t, h, n, a)       // A's segment
	must(t, "HtoDAsync on A", h.HtoDAsync(pa, pattern(n, 0xA0), a))
	must(t, "FreeAsync on A", h.FreeAsync(pa, a))
	// Two chunks, and B holds one: A runs out of memory, whatever it reclaims.
	if p, err := h.Alloc(3<<20, a); err == nil {
		t.Fatalf("3 MiB on A with one of two chunks held by B: %#x", p)
	} else if !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("3 MiB on A = %v, want ErrOutOfMemory", err)
	}
	pb := alloc(t, h, n, b) // the segment A held, if A let it go
	want := pattern(n, 0xB0)
	must(t, "HtoDAsync on B", h.HtoDAsync(pb, want, b))
	must(t, "synchronize B", dev.StreamSynchronize(b))
	must(t, "synchronize A", dev.StreamSynchronize(a))
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pb))
	if !bytes.Equal(got, want) {
		t.Errorf("B's block %#x (A's freed block was %#x) holds other bytes from byte %d: %#x, want %#x (A's copy is %#x)",
			pb, pa, firstDiff(got, want), got[firstDiff(got, want)], want[firstDiff(got, want)], pattern(n, 0xA0)[firstDiff(got, want)])
	}
	freeAll(t, h, []cuda.DevicePtr{held, pb})
}

// TestFakeFreeNeverDecommitsUnderQueuedWork: a block freed on its own stream with a copy still
// queued is reusable at once by that stream, but its memory must not go back to the provider
// (a decommit: unmap and release) before the stream has run the copy: unmap does not wait for
// the device (PyTorch found it; the fake faults the copy). Before the fix a held stream heap gave
// an emptied segment, and an object page, to the arena's purge, which decommitted them after the
// purge delay while the copy was queued.
func TestFakeFreeNeverDecommitsUnderQueuedWork(t *testing.T) {
	freeUnderQueuedWork(t, 128<<10, 17, true) // the first page fills, stops being current, empties its segment
}

// freeUnderQueuedWork allocates fill blocks of n bytes on a stream, queues a copy into the
// first, frees them all on the stream (but the last with keepLast), waits many purge delays
// and runs the stream.
func freeUnderQueuedWork(t *testing.T, n uintptr, fill int, keepLast bool) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: time.Millisecond})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	f.Hold(true)
	defer f.Complete()
	var ps []cuda.DevicePtr
	for range fill {
		ps = append(ps, alloc(t, h, n, a))
	}
	must(t, "HtoDAsync", h.HtoDAsync(ps[0], pattern(int(n), 0xC0), a))
	last := len(ps)
	if keepLast {
		last--
	}
	for _, p := range ps[:last] {
		must(t, "FreeAsync", h.FreeAsync(p, a))
	}
	time.Sleep(30 * time.Millisecond) // many purge delays
	if err := dev.StreamSynchronize(a); err != nil {
		t.Fatalf("the copy queued before a same-stream free failed when it ran (its memory was decommitted meanwhile): %v", err)
	}
	freeAll(t, h, ps[last:])
}
