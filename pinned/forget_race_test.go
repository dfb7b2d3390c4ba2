package pinned

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// Frees racing a ForgetStream of a stream they defer a buffer on: the look at whether the stream
// was forgotten and the making of its list (deferTagged, deferShared), and the push onto a list
// found before the ForgetStream (enqueue, the FreeAsync cache's push, ForgetStream's own flush).

// forgetRig is a pool of CUDA pinned memory on the fake driver, with no idle purge (a purge
// holds the shards, which sends a free past the FreeAsync cache).
type forgetRig struct {
	t   *testing.T
	f   *fakecuda.Driver
	dev *icuda.Device
	p   *Pool
}

// newForgetRig returns the rig in the child process that runs against the fake, nil in the
// test process.
func newForgetRig(t *testing.T) *forgetRig {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return nil
	}
	p, err := New(Options{Backend: CUDAHost, Capacity: 16 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &forgetRig{t: t, f: f, dev: dev, p: p}
}

func (r *forgetRig) ok(what string, err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s: %v", what, err)
	}
}

// stream makes a stream; done forgets and destroys it.
func (r *forgetRig) stream(nonBlocking bool) cuda.Stream {
	s, err := r.dev.StreamCreate(nonBlocking)
	r.ok("StreamCreate", err)
	return cuda.Stream(s)
}

func (r *forgetRig) alloc(n int, v byte) []byte {
	b, err := r.p.Alloc(n)
	r.ok("Alloc", err)
	for i := range b {
		b[i] = v
	}
	return b
}

// deferredNow returns the number of buffers deferred, every FreeAsync cache on its list.
func (r *forgetRig) deferredNow() uint64 {
	r.p.flushAll()
	n, _ := r.p.deferred()
	return n
}

// listed reports whether the pool keeps a list for s.
func (r *forgetRig) listed(s cuda.Stream) bool {
	return r.p.order.lists.Lookup(uintptr(s)) != nil
}

// forgetIn sets *hook to forget s, once, and returns whether it ran.
func (r *forgetRig) forgetIn(hook *func(), s cuda.Stream) *bool {
	ran := new(bool)
	*hook = func() {
		*hook = nil
		*ran = true
		if err := r.p.ForgetStream(s); err != nil {
			r.t.Errorf("ForgetStream: %v", err)
		}
	}
	r.t.Cleanup(func() { *hook = nil })
	return ran
}

// reuse allocates buffers of len(b) bytes filled with v until one has b's memory (256 at
// most): the next owners, for the caller to free.
func (r *forgetRig) reuse(b []byte, v byte) [][]byte {
	var next [][]byte
	for range 256 {
		c := r.alloc(len(b), v)
		next = append(next, c)
		if mem.Addr(c) == mem.Addr(b) {
			break
		}
	}
	return next
}

// read copies n bytes of device memory at d into Go memory, synchronously.
func (r *forgetRig) read(d icuda.DevicePtr, n int) []byte {
	b := make([]byte, n)
	r.ok("MemcpyDtoH", r.dev.MemcpyDtoH(mem.Addr(b), d, uintptr(n)))
	runtime.KeepAlive(b)
	return b
}

// done frees bufs, forgets and destroys ss and closes the pool.
func (r *forgetRig) done(bufs [][]byte, ss ...cuda.Stream) {
	r.t.Helper()
	r.f.Hold(false)
	for _, b := range bufs {
		r.ok("Free", r.p.Free(b))
	}
	for _, s := range ss {
		r.ok("ForgetStream", r.p.ForgetStream(s))
		r.ok("StreamDestroy", r.dev.StreamDestroy(icuda.Stream(s)))
	}
	r.ok("Close", r.p.Close())
}

// forgetAsideIn sets *hook to forget s, once, in another goroutine, and to return once s is
// forgotten (the ForgetStream may go on to its invariant check, which waits for the locks the
// hook runs under: -race, -tags invariants); wait waits for that ForgetStream and says whether
// the hook ran.
func (r *forgetRig) forgetAsideIn(hook *func(), s cuda.Stream) (wait func() bool) {
	ran := false
	done := make(chan error, 1)
	*hook = func() {
		*hook = nil
		ran = true
		go func() { done <- r.p.ForgetStream(s) }()
		for !r.p.order.lists.Forgotten(uintptr(s)) {
			runtime.Gosched()
		}
	}
	r.t.Cleanup(func() { *hook = nil })
	return func() bool {
		if ran {
			r.ok("ForgetStream", <-done)
		}
		return ran
	}
}

// TestFakeFreeRacingForgetStream: a ForgetStream of stream s while the Free of a buffer
// recorded on s alone (RecordStream) looks s up (deferTagged). The Free frees the buffer at
// once (s has passed the work recorded), makes no list for s, and s stays forgotten: the Free
// of another buffer recorded on s frees it at once too. The Free looked (Forgotten), found s
// known, and made a list for it after the ForgetStream: the buffer waited on the forgotten
// handle, and s no longer counted as forgotten, so the other buffer's Free waited for it too.
func TestFakeFreeRacingForgetStream(t *testing.T) {
	r := newForgetRig(t)
	if r == nil {
		return
	}
	s, other := r.stream(true), r.stream(true)
	c, e, x := r.alloc(4096, 1), r.alloc(4096, 2), r.alloc(4096, 3)
	r.ok("RecordStream", r.p.RecordStream(c, s))
	r.ok("RecordStream", r.p.RecordStream(e, s))
	r.ok("RecordStream", r.p.RecordStream(x, other)) // the list found last: c's Free looks s up
	ran := r.forgetIn(&tagForgetLook, s)
	r.ok("Free", r.p.Free(c))
	if !*ran {
		t.Fatal("the Free of a buffer recorded on s did not look s up")
	}
	if n := r.deferredNow(); n != 0 || r.listed(s) {
		t.Errorf("Free racing the ForgetStream of its buffer's stream: %d deferred, a list for the stream %v; want 0, false", n, r.listed(s))
	}
	r.ok("Free", r.p.Free(e))
	if n := r.deferredNow(); n != 0 {
		t.Errorf("Free of a buffer recorded only on a forgotten stream: %d deferred, want 0", n)
	}
	r.done([][]byte{x}, s, other)
}

// TestFakeSharedFreeRacingForgetStream: TestFakeFreeRacingForgetStream for a buffer recorded on
// two streams, s and u (the uses map: deferShared), the ForgetStream of s landing after the
// Free took the forgotten streams off the buffer's and before it put the buffer on the others'
// lists. The buffer waits for u alone, or, u forgotten before, is freed at once; no list is
// made for s, which stays forgotten. The Free made a list for s, and the buffer waited there.
func TestFakeSharedFreeRacingForgetStream(t *testing.T) {
	r := newForgetRig(t)
	if r == nil {
		return
	}
	other := r.stream(true)
	x := r.alloc(4096, 3)
	for _, uForgotten := range []bool{false, true} {
		s, u := r.stream(true), r.stream(true)
		c, e := r.alloc(4096, 1), r.alloc(4096, 2)
		r.ok("RecordStream", r.p.RecordStream(c, s))
		r.ok("RecordStream", r.p.RecordStream(c, u))
		r.ok("RecordStream", r.p.RecordStream(e, s))
		r.ok("RecordStream", r.p.RecordStream(x, other)) // the list found last
		want := uint64(1)                                // c, on u's list
		if uForgotten {
			r.ok("ForgetStream", r.p.ForgetStream(u))
			want = 0 // s was c's one stream left
		}
		wait := r.forgetAsideIn(&sharedForgetLook, s) // the hook runs under c's uses shard's lock
		r.ok("Free", r.p.Free(c))
		if !wait() {
			t.Fatal("the Free of a buffer recorded on two streams did not look them up")
		}
		if n := r.deferredNow(); n != want || r.listed(s) {
			t.Errorf("u forgotten before %v: Free racing the ForgetStream of s: %d deferred, a list for s %v; want %d, false", uForgotten, n, r.listed(s), want)
		}
		r.ok("Free", r.p.Free(e))
		if n := r.deferredNow(); n != want {
			t.Errorf("u forgotten before %v: Free of a buffer recorded only on s, forgotten: %d deferred, want %d", uForgotten, n, want)
		}
		for _, st := range []cuda.Stream{s, u} {
			r.ok("ForgetStream", r.p.ForgetStream(st))
			r.ok("StreamDestroy", r.dev.StreamDestroy(icuda.Stream(st)))
		}
		if n := r.deferredNow(); n != 0 {
			t.Fatalf("%d deferred once every stream was forgotten", n)
		}
	}
	r.done([][]byte{x}, other)
}

// pushRacingForget frees buffer c, recorded on stream s (the list found last), with a
// ForgetStream of s landing after the Free found s's list and before it put the buffer there
// (enqueue; the FreeAsync cache holds another stream's buffer, so that the Free cannot cache c
// in its fast section).
func (r *forgetRig) pushRacingForget(c []byte, s, other cuda.Stream) {
	r.t.Helper()
	r.ok("FreeAsync", r.p.FreeAsync(r.alloc(4096, 9), other))
	r.ok("RecordStream", r.p.RecordStream(c, s)) // the list found last: s's
	ran := r.forgetIn(&beforeEnqueue, s)
	r.ok("Free", r.p.Free(c))
	if !*ran {
		r.t.Fatal("the Free of a buffer recorded on s did not push it on a list")
	}
}

// TestFakePushRacingForgetStream: a ForgetStream of stream s after the Free of a buffer
// recorded on s found s's list and before it put the buffer there. The buffer is freed at once
// (s has passed it), in no FreeAsync cache, no list is made for s, and s stays forgotten. The
// push followed the list, gone with the ForgetStream, to a new list for the forgotten handle
// (through the FreeAsync cache where there are fast sections, which took the gone list as its
// own until the next flush).
func TestFakePushRacingForgetStream(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one shard, one FreeAsync cache
	r := newForgetRig(t)
	if r == nil {
		return
	}
	s, other := r.stream(true), r.stream(true)
	c, e := r.alloc(4096, 1), r.alloc(4096, 2)
	r.ok("RecordStream", r.p.RecordStream(e, s))
	r.pushRacingForget(c, s, other)
	if cached := r.p.order.cached.Load(); cached != 0 {
		// A cache of s's gone list, which FreeAsync's fast path takes for a new stream's with
		// s's handle, whose buffers its push would free at once, as a forgotten stream's.
		t.Errorf("Free racing the ForgetStream of its buffer's stream after it found the list: %d FreeAsync caches hold buffers, want 0", cached)
	}
	if n := r.deferredNow(); n != 1 || r.listed(s) { // the one freed on other
		t.Errorf("Free racing the ForgetStream of its buffer's stream after it found the list: %d deferred, a list for the stream %v; want 1, false", n, r.listed(s))
	}
	r.ok("Free", r.p.Free(e))
	if n := r.deferredNow(); n != 1 {
		t.Errorf("Free of a buffer recorded only on a forgotten stream: %d deferred, want 1", n)
	}
	r.done(nil, s, other)
}

// TestFakeReusedHandleAfterPushRacingForget: TestFakePushRacingForgetStream, then the driver
// gives the forgotten handle to a new, blocking stream, and a buffer is freed on it with
// FreeAsync after a copy from it queued on the legacy stream, whose work a blocking stream's
// waits for. The old stream's copy from the first buffer ran before that buffer went back, and
// the second stays deferred until the legacy stream's copy has run: both copies send the
// buffers' own bytes. The list made for the forgotten handle by the push kept the old stream's
// answer to "non-blocking?" (asked at a reclaim while it lived), so the new stream's buffer
// was taken back once the new stream alone was idle, and handed out under the legacy copy: the
// device got the next owner's bytes.
func TestFakeReusedHandleAfterPushRacingForget(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := newForgetRig(t)
	if r == nil {
		return
	}
	const n = 4096
	s, other := r.stream(true), r.stream(true)
	d1, err := r.dev.MemAlloc(n)
	r.ok("MemAlloc", err)
	d2, err := r.dev.MemAlloc(n)
	r.ok("MemAlloc", err)
	r.f.Hold(true) // the copies stay queued until something waits for them
	c := r.alloc(n, 0xC)
	r.ok("HtoDAsync", r.dev.MemcpyHtoDAsync(d1, mem.Addr(c), n, icuda.Stream(s)))
	r.pushRacingForget(c, s, other)
	r.p.Stats() // a reclaim while the old stream lives
	r.ok("StreamDestroy", r.dev.StreamDestroy(icuda.Stream(s)))
	s2 := r.stream(false) // blocking: its work comes after the legacy stream's
	if s2 != s {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed one's %#x", s2, s)
	}
	b := r.alloc(n, 0xB)
	r.ok("HtoDAsync on the legacy stream", r.dev.MemcpyHtoDAsync(d2, mem.Addr(b), n, 0))
	r.ok("FreeAsync", r.p.FreeAsync(b, s2))
	r.p.Stats()
	next := append(r.reuse(c, 0xEE), r.reuse(b, 0xEE)...)
	r.f.Hold(false)
	r.ok("Synchronize", r.dev.Synchronize())
	if got := r.read(d1, n); !bytes.Equal(got, bytes.Repeat([]byte{0xC}, n)) {
		t.Errorf("the old stream's copy sent %#x...: its buffer went back before the copy ran", got[:8])
	}
	if got := r.read(d2, n); !bytes.Equal(got, bytes.Repeat([]byte{0xB}, n)) {
		t.Errorf("the legacy stream's copy sent %#x...: the buffer freed on the blocking stream with the reused handle went back before the copy ran", got[:8])
	}
	r.ok("MemFree", r.dev.MemFree(d1))
	r.ok("MemFree", r.dev.MemFree(d2))
	r.done(next, s2, other)
}

// TestFakeCacheOutRacingForgetStream: a ForgetStream of stream s while a FreeAsync on another
// stream has taken the shard's FreeAsync cache, full of buffers freed on s, out of the shard
// and not yet put them on s's list. The push finds s forgotten: the buffers are freed at once
// (s has passed them), and no list is made for s. It followed s's list, gone with the
// ForgetStream, to a new list for the forgotten handle, where the buffers waited.
func TestFakeCacheOutRacingForgetStream(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := newForgetRig(t)
	if r == nil {
		return
	}
	if !r.p.fast {
		t.Skip("no fast sections in this build (the race detector turns them off), so no FreeAsync cache")
	}
	s, other := r.stream(true), r.stream(true)
	bufs := make([][]byte, pendMax+1)
	for i := range bufs {
		bufs[i] = r.alloc(4096, 1)
	}
	for _, b := range bufs[:pendMax] { // the shard's cache, of s, full
		r.ok("FreeAsync", r.p.FreeAsync(b, s))
	}
	ran := r.forgetIn(&afterCacheOut, s)
	r.ok("FreeAsync", r.p.FreeAsync(bufs[pendMax], other))
	if !*ran {
		t.Fatal("the FreeAsync on another stream did not take the shard's cache out")
	}
	if n := r.deferredNow(); n != 1 || r.listed(s) { // the one freed on other
		t.Errorf("the FreeAsync cache's push racing the ForgetStream of its stream: %d deferred, a list for the stream %v; want 1, false", n, r.listed(s))
	}
	r.done(nil, s, other)
}

// TestFakeForgetStreamLeavesNoCache: a Free of a buffer recorded on stream s that caches it in
// its shard's FreeAsync cache, as s's, after ForgetStream(s) has flushed the caches and before
// it forgets s. ForgetStream returns with no cache of s's: the buffer is freed (s has passed
// it). Then the driver gives s's handle to a new stream, which copies from a buffer freed on it
// with FreeAsync: the buffer waits for the copy. The cache stayed, with s's gone list, and
// FreeAsync's fast path took it for the new stream's (same handle, no check): the first
// buffer waited for the new stream's work, and a cache pushed where a forgotten stream's push
// is refused would have freed the new stream's buffer under its copy.
func TestFakeForgetStreamLeavesNoCache(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	r := newForgetRig(t)
	if r == nil {
		return
	}
	if !r.p.fast {
		t.Skip("no fast sections in this build (the race detector turns them off), so no FreeAsync cache")
	}
	const n = 4096
	s := r.stream(true)
	d, err := r.dev.MemAlloc(n)
	r.ok("MemAlloc", err)
	c := r.alloc(n, 0xC)
	r.ok("RecordStream", r.p.RecordStream(c, s)) // the list found last: s's
	ran := false
	defer func() { forgetFlushed = nil }()
	forgetFlushed = func() {
		forgetFlushed, ran = nil, true
		r.ok("Free", r.p.Free(c)) // into the cache, in the Free's fast section
	}
	r.ok("ForgetStream", r.p.ForgetStream(s))
	if !ran {
		t.Fatal("ForgetStream did not flush the caches")
	}
	// No flush here: what ForgetStream leaves in a cache stays there for the next FreeAsync.
	if cached, n := r.p.order.cached.Load(), r.p.order.lists.Totals().Items; cached != 0 || n != 0 || r.listed(s) {
		t.Errorf("after ForgetStream: %d FreeAsync caches hold buffers, %d deferred on the lists, a list for the stream %v; want 0, 0, false", cached, n, r.listed(s))
	}
	r.ok("StreamDestroy", r.dev.StreamDestroy(icuda.Stream(s)))
	s2 := r.stream(true)
	if s2 != s {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed one's %#x", s2, s)
	}
	r.f.Hold(true)
	b := r.alloc(n, 0xB)
	r.ok("HtoDAsync", r.dev.MemcpyHtoDAsync(d, mem.Addr(b), n, icuda.Stream(s2)))
	r.ok("FreeAsync", r.p.FreeAsync(b, s2))
	r.p.Stats()
	next := r.reuse(b, 0xEE)
	r.f.Hold(false)
	r.ok("StreamSynchronize", r.dev.StreamSynchronize(icuda.Stream(s2)))
	if got := r.read(d, n); !bytes.Equal(got, bytes.Repeat([]byte{0xB}, n)) {
		t.Errorf("the new stream's copy sent %#x...: its buffer went back before the copy ran", got[:8])
	}
	r.ok("MemFree", r.dev.MemFree(d))
	r.done(next, s2)
}
