package device

import (
	"bytes"
	"errors"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeFreeAsyncRecordsNoEvent: a FreeAsync across streams makes no driver call; the poll
// of the next Stats (or Alloc) records one event on the freeing stream, busy with held work,
// for every free waiting there, and no other while that one has not completed; once the stream
// has run everything, the frees behind the event are done, and the free pushed since too, with
// no event: a query finds the stream idle.
func TestFakeFreeAsyncRecordsNoEvent(t *testing.T) {
	// The idle purge is off: it records events of its own on a busy stream whose heap has
	// been quiet for a purge delay, which a loaded machine can make of any pause here (the
	// same count failed pinned's TestFakeFreeAsync).
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	ps := []cuda.DevicePtr{alloc(t, h, 4096, a), alloc(t, h, 4096, a), alloc(t, h, 4096, a)}
	busy := alloc(t, h, 4096, b)
	f.Hold(true)
	defer f.Complete()
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(busy), 1, 4096, pcuda.Stream(b)))
	records := func() int64 { return f.Stat(fakecuda.EventRecords) }
	r0 := records()
	for _, p := range ps[:2] {
		must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	}
	if n := records() - r0; n != 0 {
		t.Fatalf("two FreeAsync on another stream recorded %d events, want none", n)
	}
	if st := h.Stats(); st.Deferred != 2 || records()-r0 != 1 {
		t.Fatalf("a poll with two frees on a busy stream: %d deferred, %d events recorded; want 2, 1", st.Deferred, records()-r0)
	}
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(ps[2]), pcuda.Stream(b)))
	extra := alloc(t, h, 4096, a) // a poll too
	if st := h.Stats(); st.Deferred != 3 || records()-r0 != 1 {
		t.Fatalf("polls while b's event is held: %d deferred, %d events recorded; want 3, 1", st.Deferred, records()-r0)
	}
	f.CompleteStream(b)
	if st := h.Stats(); st.Deferred != 0 || records()-r0 != 1 {
		t.Fatalf("a poll after b ran everything: %d deferred, %d events recorded; want 0 (the free after the event too: b is idle), 1", st.Deferred, records()-r0)
	}
	f.Complete()
	must(t, "Sync", h.Sync())
	if st := h.Stats(); st.Deferred != 0 || st.Live != 2 {
		t.Fatalf("after Sync: %d deferred, %d live; want 0, 2", st.Deferred, st.Live)
	}
	freeAll(t, h, []cuda.DevicePtr{busy, extra})
}

// TestFakeDestroyedStreamRecovered: blocks of stream a are cleared by memsets queued on stream b
// and freed on b, all held; b is then destroyed without ForgetStream, its work still queued
// (the driver runs it, but refuses the handle from then on), and one more block is freed on it.
// The next Alloc's poll finds b refused: it must synchronize the context (which runs b's
// memsets) before the frees are done, then do every one of them, so that the Alloc gets one
// of those blocks back, and a's writes into the blocks taken back survive b's work. Skipping
// the recovery loses the frees: the blocks stay deferred for good.
func TestFakeDestroyedStreamRecovered(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	b, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	const n, blocks = 64 << 10, 4
	var ps []cuda.DevicePtr
	for range blocks {
		ps = append(ps, alloc(t, h, n, a))
	}
	f.Hold(true)
	defer f.Complete()
	for _, p := range ps[:blocks-1] {
		must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(p), 0xAB, n, pcuda.Stream(b)))
		must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	}
	must(t, "StreamDestroy", dev.StreamDestroy(b))
	must(t, "FreeAsync on b, destroyed", h.FreeAsync(pcuda.DevicePtr(ps[blocks-1]), pcuda.Stream(b)))
	if f.Pending() == 0 {
		t.Fatal("b's memsets ran before the poll: the test holds nothing")
	}
	synced := false
	afterLostSync = func() {
		synced = true
		if f.Pending() != 0 {
			t.Errorf("the recovery handed frees back with work of %d streams still queued", f.Pending())
		}
		if len(h.deferred) != blocks {
			t.Errorf("%d frees done before the context was synchronized, want none", blocks-len(h.deferred))
		}
	}
	defer func() { afterLostSync = nil }()
	var got []cuda.DevicePtr
	for range blocks {
		got = append(got, alloc(t, h, n, a))
	}
	if !synced {
		t.Fatal("the Alloc's poll did not synchronize the context for the destroyed stream")
	}
	if st := h.Stats(); st.Deferred != 0 || st.Live != blocks {
		t.Fatalf("after the recovery: %d deferred, %d live; want 0, %d (every free done, every block reused)", st.Deferred, st.Live, blocks)
	}
	reused := map[cuda.DevicePtr]bool{}
	for _, p := range ps {
		reused[p] = true
	}
	want := pattern(n, 0x5C)
	for _, p := range got {
		if !reused[p] {
			t.Errorf("the Alloc after the recovery got %#x, not a block freed on the destroyed stream", p)
		}
		must(t, "HtoDAsync on a", h.HtoDAsync(pcuda.DevicePtr(p), want, pcuda.Stream(a)))
	}
	must(t, "synchronize a", dev.StreamSynchronize(a))
	f.Complete()
	must(t, "synchronize the context", dev.Synchronize())
	buf := make([]byte, n)
	for _, p := range got {
		must(t, "DtoH", h.DtoH(buf, pcuda.DevicePtr(p)))
		if !bytes.Equal(buf, want) {
			i := firstDiff(buf, want)
			t.Errorf("block %#x, reused after the recovery, holds %#x at byte %d, want %#x: the destroyed stream's work ran after the reuse", p, buf[i], i, want[i])
		}
	}
	freeAll(t, h, got)
}

// TestFakeForgetStreamTakesBackOthersFrees: a block of stream a freed on stream b, which has
// since run everything, with no poll between: ForgetStream(a) takes the free back (b has
// passed it) and forgets a; while b is still busy, it refuses with heap.ErrLiveBlocks and
// keeps a, the block still deferred.
func TestFakeForgetStreamTakesBackOthersFrees(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20})
	if f == nil {
		return
	}
	a, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer dev.StreamDestroy(a)
	b := newStream(t, dev, h)
	p := alloc(t, h, 4096, a)
	f.Hold(true)
	defer f.Complete()
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(p), 0, 4096, pcuda.Stream(b)))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	if err := h.ForgetStream(pcuda.Stream(a)); !errors.Is(err, heap.ErrLiveBlocks) {
		t.Fatalf("ForgetStream(a) while b has not passed the free of a's block: %v, want ErrLiveBlocks", err)
	}
	f.CompleteStream(b)
	must(t, "ForgetStream(a) once b has passed the free", h.ForgetStream(pcuda.Stream(a)))
	if st := h.Stats(); st.Deferred != 0 || st.Live != 0 {
		t.Fatalf("after ForgetStream: %d deferred, %d live; want none", st.Deferred, st.Live)
	}
}
