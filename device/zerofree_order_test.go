package device

import (
	"bytes"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeZeroOnFreeFreeAfterSameStreamReuse: with Options.ZeroOnFree, a block freed on its
// non-blocking stream s is handed at once to the next Alloc on s while its old owner's work is
// still queued there (here a copy out of it, held by the fake); the new owner's synchronous Free
// clears it with a memset on the legacy stream, which must come after that work, as a
// synchronous copy into the block does (TestFakeSyncCopyAfterSameStreamReuse), or it wipes the
// bytes the old owner's copy has yet to read. Before, the memset ordered nothing after s: it
// ran at once, and the old owner's copy read zeros.
func TestFakeZeroOnFreeFreeAfterSameStreamReuse(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	s := newStream(t, dev, h)
	const n = 4096
	want := pattern(n, 9)
	p, out := alloc(t, h, n, s), alloc(t, h, n, s)
	must(t, "HtoD", h.HtoD(pcuda.DevicePtr(p), want)) // the old owner's bytes, in place
	f.Hold(true)
	// The old owner copies its bytes out on s and frees the block there: both held.
	must(t, "DtoDAsync", h.DtoDAsync(pcuda.DevicePtr(out), pcuda.DevicePtr(p), n, pcuda.Stream(s)))
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	q := alloc(t, h, n, s)
	if q != p {
		t.Fatalf("the block freed on s was not reused at once (%#x, then %#x)", p, q)
	}
	must(t, "Free of the reused block", h.Free(pcuda.DevicePtr(q))) // the new owner queued nothing
	f.Hold(false)
	must(t, "StreamSynchronize", dev.StreamSynchronize(s)) // runs what s still had queued
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(out)))
	if !bytes.Equal(got, want) {
		i := firstDiff(got, want)
		t.Errorf("the old owner's copy out of its freed block: byte %d reads %#x, want %#x: "+
			"the new owner's Free cleared the block before s ran the copy", i, got[i], want[i])
	}
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(out), pcuda.Stream(s)))
}

// TestFakeZeroOnFreeFreeAsyncElsewhereAfterSameStreamReuse: with Options.ZeroOnFree, a block
// freed on its non-blocking stream s is handed at once to the next Alloc on s while its old
// owner's work is still queued there (a copy out of it, held by the fake); the new owner, who
// never used it, frees it on another stream t, whose memset must come after that work, as a
// synchronous Free's does (TestFakeZeroOnFreeFreeAfterSameStreamReuse): the new owner cannot
// order t after work it does not know of. Before, the memset on t ordered nothing after s: t
// ran it first, and the old owner's copy read zeros.
func TestFakeZeroOnFreeFreeAsyncElsewhereAfterSameStreamReuse(t *testing.T) {
	zeroOnFreeAsyncElsewhere(t, false)
}

// TestFakeZeroOnFreeFreeAsyncElsewhereAfterLegacyReuse is the test above with s the legacy
// default stream, whose work a non-blocking t is not ordered after either.
func TestFakeZeroOnFreeFreeAsyncElsewhereAfterLegacyReuse(t *testing.T) {
	zeroOnFreeAsyncElsewhere(t, true)
}

func zeroOnFreeAsyncElsewhere(t *testing.T, legacy bool) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	s, other := cuda.Stream(0), newStream(t, dev, h)
	if !legacy {
		s = newStream(t, dev, h)
	}
	const n = 4096
	want := pattern(n, 11)
	p, out := alloc(t, h, n, s), alloc(t, h, n, s)
	must(t, "HtoD", h.HtoD(pcuda.DevicePtr(p), want)) // the old owner's bytes, in place
	f.Hold(true)
	// The old owner copies its bytes out on s and frees the block there: both held.
	must(t, "DtoDAsync", h.DtoDAsync(pcuda.DevicePtr(out), pcuda.DevicePtr(p), n, pcuda.Stream(s)))
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
	q := alloc(t, h, n, s)
	if q != p {
		t.Fatalf("the block freed on s was not reused at once (%#x, then %#x)", p, q)
	}
	// The new owner queued nothing, and frees the block on another stream: its memset there.
	must(t, "FreeAsync on another stream", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(other)))
	f.CompleteStream(other) // runs the memset, after what it waits for
	f.Hold(false)
	must(t, "StreamSynchronize", dev.StreamSynchronize(s)) // runs what s still had queued
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(out)))
	if !bytes.Equal(got, want) {
		i := firstDiff(got, want)
		t.Errorf("the old owner's copy out of its freed block: byte %d reads %#x, want %#x: "+
			"the new owner's FreeAsync on another stream cleared the block before s ran the copy",
			i, got[i], want[i])
	}
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(out), pcuda.Stream(s)))
}
