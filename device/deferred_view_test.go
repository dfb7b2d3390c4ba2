package device

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
)

// TestFakeDeferredByStream: blocks allocated on one stream and freed on two others, both held,
// report under their freeing stream with their sizes; once the streams have passed the frees,
// none does.
func TestFakeDeferredByStream(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20})
	if f == nil {
		return
	}
	a, b, c := newStream(t, dev, h), newStream(t, dev, h), newStream(t, dev, h)
	f.Hold(true)
	defer f.Complete()
	if got := h.DeferredByStream(); got != nil {
		t.Fatalf("a new heap: %+v, want none", got)
	}
	p1, p2, p3 := alloc(t, h, 4096, a), alloc(t, h, 8192, a), alloc(t, h, 1<<20, a)
	// b and c use the blocks they free: their frees wait for that work.
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(p1), 0, 4096, pcuda.Stream(b)))
	must(t, "MemsetAsync on c", h.MemsetAsync(pcuda.DevicePtr(p3), 0, 1<<20, pcuda.Stream(c)))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p1), pcuda.Stream(b)))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p2), pcuda.Stream(b)))
	must(t, "FreeAsync on c", h.FreeAsync(pcuda.DevicePtr(p3), pcuda.Stream(c)))
	got := h.DeferredByStream()
	want := map[pcuda.Stream]StreamDeferred{
		pcuda.Stream(b): {Stream: pcuda.Stream(b), Blocks: 2, Bytes: 4096 + 8192},
		pcuda.Stream(c): {Stream: pcuda.Stream(c), Blocks: 1, Bytes: 1 << 20},
	}
	if len(got) != len(want) {
		t.Fatalf("two streams holding frees: %+v, want %+v", got, want)
	}
	for i, sd := range got {
		if sd != want[sd.Stream] {
			t.Errorf("stream %#x: %+v, want %+v", sd.Stream, sd, want[sd.Stream])
		}
		if i > 0 && got[i-1].Stream >= sd.Stream {
			t.Errorf("not ordered by stream: %+v", got)
		}
	}
	f.CompleteStream(b)
	if got := h.DeferredByStream(); len(got) != 1 || got[0] != want[pcuda.Stream(c)] {
		t.Errorf("b complete: %+v, want only c's", got)
	}
	f.CompleteStream(c)
	if st := h.Stats(); st.Deferred != 0 {
		t.Fatalf("both streams complete: %d deferred", st.Deferred)
	}
	if got := h.DeferredByStream(); got != nil {
		t.Errorf("both streams complete: %+v, want none", got)
	}
}
