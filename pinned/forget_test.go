package pinned_test

import (
	"errors"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakePerThreadStreamRefused: the per-thread default stream (CU_STREAM_PER_THREAD, handle 2)
// names the default stream of the calling OS thread, and the pool queries and records its
// streams from whatever thread it runs on: it used to accept the handle, and order reuse after
// some other thread's stream. Now FreeAsync and RecordStream refuse it, and change nothing.
func TestFakePerThreadStreamRefused(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	b := r.alloc(4096, 1)
	if err := r.pool.FreeAsync(b, 2); !errors.Is(err, pinned.ErrInvalidStream) {
		t.Errorf("FreeAsync on the per-thread default stream: %v, want ErrInvalidStream", err)
	}
	if err := r.pool.RecordStream(b, 2); !errors.Is(err, pinned.ErrInvalidStream) {
		t.Errorf("RecordStream of the per-thread default stream: %v, want ErrInvalidStream", err)
	}
	if st := r.pool.Stats(); st.Live != 1 || st.Deferred != 0 {
		t.Errorf("after the refusals: %d live, %d deferred; want 1 and 0", st.Live, st.Deferred)
	}
	ok(t, "Free", r.pool.Free(b)) // no stream recorded: freed at once
	if st := r.pool.Stats(); st.Live != 0 {
		t.Errorf("%d live after Free", st.Live)
	}
	r.finish()
}

// TestFakeIdleStreamDropped: a stream whose buffers have all come back is forgotten after two
// reclaims, even when nobody calls ForgetStream: a FreeAsync on its handle once it is destroyed
// is checked with the driver again, and refused. It used to be accepted for ever (the list was
// kept), so a handle the driver reused for another device's stream would have been taken for the
// old one.
func TestFakeIdleStreamDropped(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	ok(t, "FreeAsync", r.pool.FreeAsync(r.alloc(4096, 1), pcuda.Stream(s)))
	ok(t, "FreeAsync", r.pool.FreeAsync(r.alloc(4096, 2), pcuda.Stream(r.s))) // the stream checked last
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(s))
	r.pool.Stats()
	r.pool.Stats()
	ok(t, "StreamDestroy", r.dev.StreamDestroy(s))
	b := r.alloc(4096, 3)
	if err := r.pool.FreeAsync(b, pcuda.Stream(s)); !errors.Is(err, pinned.ErrInvalidStream) {
		t.Fatalf("FreeAsync on a destroyed stream whose buffers had all come back: %v, want ErrInvalidStream", err)
	}
	ok(t, "Free", r.pool.Free(b))
	r.finish()
}

// TestFakeForgetStream: ForgetStream waits for the stream, takes back the buffers freed on it,
// takes it off the live buffers it was recorded on (whose Free is then immediate), and forgets
// it: the handle is checked with the driver again, so once destroyed it is refused.
func TestFakeForgetStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{ZeroOnFree: true})
	if r == nil {
		return
	}
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	const n = 32 << 10
	d := r.devAlloc(n)
	r.f.Hold(true)
	a, b, c := r.alloc(n, 0xA), r.alloc(n, 0xB), r.alloc(n, 0xC)
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pcuda.DevicePtr(d), a, pcuda.Stream(s)))
	ok(t, "FreeAsync", r.pool.FreeAsync(a, pcuda.Stream(s)))
	ok(t, "RecordStream", r.pool.RecordStream(b[10:20], pcuda.Stream(s)))
	ok(t, "RecordStream", r.pool.RecordStream(c, pcuda.Stream(s)))
	ok(t, "RecordStream", r.pool.RecordStream(c, pcuda.Stream(r.s)))
	if got := r.deferred(); got != 1 {
		t.Fatalf("%d deferred, want 1", got)
	}
	ok(t, "ForgetStream", r.pool.ForgetStream(pcuda.Stream(s))) // synchronizes s, Hold or not
	if got := r.deferred(); got != 0 {
		t.Fatalf("%d deferred after ForgetStream, want 0", got)
	}
	for i, x := range a {
		if x != 0 {
			t.Fatalf("byte %d of a buffer freed on a forgotten stream is %#x: not scrubbed", i, x)
		}
	}
	ok(t, "Free", r.pool.Free(b)) // s was its only stream: no wait
	if got := r.deferred(); got != 0 {
		t.Fatalf("Free of a buffer recorded only on a forgotten stream deferred it")
	}
	ok(t, "Free", r.pool.Free(c)) // still waits for r.s, which Hold keeps busy
	if got := r.deferred(); got != 1 {
		t.Fatalf("%d deferred after a Free of a buffer r.s uses, want 1", got)
	}
	ok(t, "ForgetStream of a stream with nothing", r.pool.ForgetStream(pcuda.Stream(s)))
	ok(t, "heap ForgetStream", r.heap.ForgetStream(pcuda.Stream(s)))
	ok(t, "StreamDestroy", r.dev.StreamDestroy(s))
	e := r.alloc(n, 0xE)
	if err := r.pool.FreeAsync(e, pcuda.Stream(s)); !errors.Is(err, pinned.ErrInvalidStream) {
		t.Fatalf("FreeAsync on a forgotten, destroyed stream: %v, want ErrInvalidStream", err)
	}
	ok(t, "Free", r.pool.Free(e))
	r.f.Hold(false)
	ok(t, "ForgetStream", r.pool.ForgetStream(pcuda.Stream(r.s)))
	if st := r.pool.Stats(); st.Live != 0 || st.Deferred != 0 {
		t.Fatalf("%d live, %d deferred at the end", st.Live, st.Deferred)
	}
	ok(t, "Free", r.heap.Free(pcuda.DevicePtr(d)))
	r.finish()
}
