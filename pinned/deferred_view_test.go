package pinned_test

import (
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeDeferredByStream: buffers freed with FreeAsync on two held streams report under
// their stream, with their bytes, the FreeAsync caches included; once the streams have
// completed and a Stats has reclaimed, none does.
func TestFakeDeferredByStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s2 := r.stream()
	if got := r.pool.DeferredByStream(); got != nil {
		t.Fatalf("a new pool: %+v, want none", got)
	}
	r.f.Hold(true)
	// All allocated first (an allocation's slow path flushes its shard's cache), then freed:
	// the last two stay in a shard's FreeAsync cache, on no list yet.
	want := map[pcuda.Stream]pinned.StreamDeferred{}
	sizes := []int{4 << 10, 2 << 20, 64 << 10, 4 << 10}
	streams := []cuda.Stream{r.s, r.s, s2, s2}
	var bufs [][]byte
	for i, n := range sizes {
		bufs = append(bufs, r.alloc(n, byte(i)))
	}
	for i, b := range bufs {
		s := pcuda.Stream(streams[i])
		ok(t, "FreeAsync", r.pool.FreeAsync(b, s))
		w := want[s]
		w.Stream, w.Buffers, w.Bytes = s, w.Buffers+1, w.Bytes+sizes[i]
		want[s] = w
	}
	got := r.pool.DeferredByStream()
	if len(got) != 2 {
		t.Fatalf("two held streams: %+v, want %+v", got, want)
	}
	for i, sd := range got {
		if sd != want[sd.Stream] {
			t.Errorf("stream %#x: %+v, want %+v", sd.Stream, sd, want[sd.Stream])
		}
		if i > 0 && got[i-1].Stream >= sd.Stream {
			t.Errorf("not ordered by stream: %+v", got)
		}
	}
	if st := r.pool.Stats(); st.Deferred != 4 {
		t.Errorf("Stats with both streams held: %d deferred, want 4", st.Deferred)
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(s2))
	if st := r.pool.Stats(); st.Deferred != 0 {
		t.Fatalf("both streams complete: %d deferred", st.Deferred)
	}
	if got := r.pool.DeferredByStream(); got != nil {
		t.Errorf("both streams complete, after Stats: %+v, want none", got)
	}
	r.finish()
}
