package pinned

import (
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// Frees racing a ForgetStream of a stream they defer a buffer on: the look at whether the stream
// was forgotten and the making of its list (deferTagged, deferShared).

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
