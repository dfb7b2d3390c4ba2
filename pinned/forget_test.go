package pinned_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/invariants"
	"github.com/pinmalloc/pinmalloc/internal/mem"
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

// TestFakeForgetStream: ForgetStream waits for the stream (the copy from a buffer freed on it
// reads the buffer's bytes, not the scrub that follows its take-back), takes back the buffers
// freed on it, takes it off the live buffers it was recorded on (whose Free is then immediate),
// and forgets it: the handle is checked with the driver again, so once destroyed it is refused.
// The pool's purge is off: the test reads the buffer freed on the stream after its take-back,
// and a purge between the two rightly decommits it (unmapped: a fault).
func TestFakeForgetStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{ZeroOnFree: true, PurgeDelay: -1})
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
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(s))
	if got := r.read(d, n); got[0] != 0xA || got[n-1] != 0xA {
		t.Fatalf("the copy from a buffer freed on s holds %#x...%#x, want 0xa: the buffer was scrubbed before s had run it", got[0], got[n-1])
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

// TestFakeForgetStreamCostsItsOwn: ForgetStream of a stream costs what that stream holds, not a
// walk of the live buffers: with 0 or 20,000 live buffers (half of them recorded on another
// stream) it allocates the same, nothing (2,048 live and one allocation more at most under
// -race and -tags invariants, whose checks walk every block after every call and allocate). It
// read the tags of every live buffer, a batch of 1,024 at a time under every shard's lock, each
// batch allocating (0.49 ms with 20,000 live, 4.4 ms with 100,000). The pool's purge is off:
// testing.AllocsPerRun counts every allocation of the process, and purger ticks during the
// calls (a pause of a purge delay) added theirs.
func TestFakeForgetStreamCostsItsOwn(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{Capacity: 256 << 20, PurgeDelay: -1})
	if r == nil {
		return
	}
	s := r.stream()
	other := r.stream()
	forget := func() float64 {
		return testing.AllocsPerRun(20, func() { ok(t, "ForgetStream", r.pool.ForgetStream(pcuda.Stream(s))) })
	}
	ok(t, "FreeAsync", r.pool.FreeAsync(r.alloc(4096, 1), pcuda.Stream(s))) // s known
	empty := forget()
	nlive := 20000
	if invariants.Enabled {
		nlive = 2048
	}
	var live [][]byte
	for i := range nlive {
		b, err := r.pool.Alloc(4096)
		ok(t, "Alloc", err)
		if i%2 == 0 {
			ok(t, "RecordStream", r.pool.RecordStream(b, pcuda.Stream(other)))
		}
		live = append(live, b)
	}
	full := forget()
	if full > empty+1 || !invariants.Enabled && (empty != 0 || full != 0) {
		t.Errorf("ForgetStream allocated %v times with nothing live, %v with %d live; want 0 both", empty, full, nlive)
	}
	for _, b := range live {
		ok(t, "Free", r.pool.Free(b))
	}
	ok(t, "ForgetStream", r.pool.ForgetStream(pcuda.Stream(other)))
	r.finish()
}

// BenchmarkFakeForgetStream is ForgetStream of a stream the pool holds one deferred buffer for,
// with 0, 20,000 and 100,000 other live buffers (half of them recorded on another stream).
func BenchmarkFakeForgetStream(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	dev := f.Open(b, 0)
	p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	s, err := dev.StreamCreate(true)
	if err != nil {
		b.Fatal(err)
	}
	other, err := dev.StreamCreate(true)
	if err != nil {
		b.Fatal(err)
	}
	var live [][]byte
	for _, n := range []int{0, 20000, 100000} {
		for len(live) < n {
			buf, err := p.Alloc(4096)
			if err == nil && len(live)%2 == 0 {
				err = p.RecordStream(buf, pcuda.Stream(other))
			}
			if err != nil {
				b.Fatal(err)
			}
			live = append(live, buf)
		}
		b.Run(fmt.Sprintf("live=%d", n), func(b *testing.B) {
			for range b.N {
				buf, err := p.Alloc(4096)
				if err == nil {
					err = p.FreeAsync(buf, pcuda.Stream(s))
				}
				if err == nil {
					err = p.ForgetStream(pcuda.Stream(s))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, buf := range live {
		if err := p.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
	for _, st := range []cuda.Stream{s, other} {
		if err := p.ForgetStream(pcuda.Stream(st)); err != nil {
			b.Fatal(err)
		}
		if err := dev.StreamDestroy(st); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFakeForgetStreamFailedKeepsRecord: a buffer recorded on stream s (an HtoDAsync from it, still
// queued; s's list, empty, left the lists at two reclaims), then a ForgetStream of s that fails (s
// captures a graph: the pool can neither query nor synchronize it). The failed ForgetStream used to
// mark s forgotten all the same, so the buffer's later Free took it back at once and the next Alloc
// handed it out with the copy still queued: the device got the next owner's bytes. It also
// synchronized the context after the refused wait, which invalidated the user's capture. Now it
// refuses (cuda.ErrCapturing) and leaves s known.
func TestFakeForgetStreamFailedKeepsRecord(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	const n = 4096
	d := r.devAlloc(n)
	a := r.alloc(n, 0xA1)
	r.f.Hold(true) // the copy stays queued
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pcuda.DevicePtr(d), a, pcuda.Stream(r.s)))
	r.pool.Stats() // two reclaims find s's list empty: it leaves the lists (the record stays)
	r.pool.Stats()
	if n := pinned.StreamLists(r.pool); n != 0 {
		t.Fatalf("%d stream lists after two reclaims, want 0", n)
	}
	runtime.LockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(r.s, cuda.CaptureGlobal))
	ferr := r.pool.ForgetStream(pcuda.Stream(r.s))
	g, cerr := r.dev.StreamEndCapture(r.s)
	runtime.UnlockOSThread()
	if cerr != nil {
		t.Errorf("ForgetStream invalidated the user's capture: %v", cerr)
	} else {
		ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	}
	if !errors.Is(ferr, pcuda.ErrCapturing) {
		t.Errorf("ForgetStream during a capture of its stream: %v, want an error matching cuda.ErrCapturing", ferr)
	}
	ok(t, "Free", r.pool.Free(a))
	if n := r.deferred(); n != 1 {
		t.Errorf("Free of a buffer whose copy is queued, after the failed ForgetStream: %d deferred, want 1", n)
	}
	var next [][]byte // the next owners, who write their bytes: up to the one handed a's memory
	for range 256 {
		b := r.alloc(n, 0xB2)
		next = append(next, b)
		if mem.Addr(b) == mem.Addr(a) {
			break
		}
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if got := r.read(d, n); !bytes.Equal(got, bytes.Repeat([]byte{0xA1}, n)) {
		t.Fatalf("the device got the next owner's bytes (ForgetStream failed with %v, then the buffer's Free took it back at once)", ferr)
	}
	for _, b := range next {
		ok(t, "Free", r.pool.Free(b))
	}
	ok(t, "heap Free", r.heap.Free(pcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeForgetDestroyedStreamBesideCapture: ForgetStream of a stream the user destroyed first,
// with a buffer deferred on it behind a copy still queued there, while the user captures a CUDA
// graph on another stream: one the pool knows (r.s, a buffer deferred on it: non-blocking, so the
// legacy stream does not answer for it), or a blocking stream the pool has never seen (the
// legacy stream answers for it). The driver refuses the destroyed stream's handle, and the
// synchronize of the context that waits for its work instead ends every capture of the context:
// ForgetStream synchronized without asking, and the user's capture was invalidated. Now it asks
// the pool's streams and the legacy stream first, and refuses (cuda.ErrCapturing), keeping the
// stream and its buffer, with the capture valid; once the capture has ended, it forgets it.
func TestFakeForgetDestroyedStreamBesideCapture(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	const n = 4096
	d := r.devAlloc(n)
	r.f.Hold(true) // the copies stay queued
	k := r.alloc(n, 0xC)
	ok(t, "HtoDAsync on r.s", r.heap.HtoDAsync(pcuda.DevicePtr(d), k, pcuda.Stream(r.s)))
	ok(t, "FreeAsync on r.s", r.pool.FreeAsync(k, pcuda.Stream(r.s)))
	blocking, err := r.dev.StreamCreate(false)
	ok(t, "StreamCreate", err)
	defer func() { ok(t, "StreamDestroy", r.dev.StreamDestroy(blocking)) }()
	waiting := func(s cuda.Stream) int {
		for _, sd := range r.pool.DeferredByStream() { // takes nothing back, unlike Stats
			if sd.Stream == pcuda.Stream(s) {
				return sd.Buffers
			}
		}
		return 0
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, c := range []struct {
		what    string
		capture cuda.Stream
	}{{"a non-blocking stream of the pool's", r.s}, {"a blocking stream the pool has not seen", blocking}} {
		s, err := r.dev.StreamCreate(true)
		ok(t, "StreamCreate", err)
		b := r.alloc(n, 0xA)
		ok(t, "HtoDAsync", r.dev.MemcpyHtoDAsync(d, mem.Addr(b), n, s))
		ok(t, "FreeAsync", r.pool.FreeAsync(b, pcuda.Stream(s)))
		ok(t, "StreamDestroy, without ForgetStream", r.dev.StreamDestroy(s)) // its copy still queued
		ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(c.capture, cuda.CaptureGlobal))
		ferr := r.pool.ForgetStream(pcuda.Stream(s))
		g, cerr := r.dev.StreamEndCapture(c.capture)
		if cerr != nil {
			t.Fatalf("ForgetStream of a destroyed stream while %s captures invalidated the capture: %v (ForgetStream: %v)", c.what, cerr, ferr)
		}
		ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
		if !errors.Is(ferr, pcuda.ErrCapturing) {
			t.Errorf("ForgetStream of a destroyed stream while %s captures: %v; want an error matching cuda.ErrCapturing", c.what, ferr)
		}
		t.Logf("while %s captures: %v", c.what, ferr)
		if got := waiting(s); got != 1 || r.f.Pending() == 0 {
			t.Errorf("ForgetStream refused while %s captures: %d buffers wait for the destroyed stream, %d streams with work queued; want 1 and its copy (nothing changes)", c.what, got, r.f.Pending())
		}
		ok(t, "ForgetStream once the capture has ended", r.pool.ForgetStream(pcuda.Stream(s)))
		if got := waiting(s); got != 0 || r.f.Pending() != 0 {
			t.Errorf("after ForgetStream: %d buffers wait for the destroyed stream, %d streams with work queued; want none", got, r.f.Pending())
		}
	}
	r.f.Hold(false)
	ok(t, "heap Free", r.heap.Free(pcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeForgetDestroyedStreamBesideCaptureOnRecorded: TestFakeForgetDestroyedStreamBesideCapture
// with the capture on a non-blocking stream the pool knows only through a live buffer recorded
// on it (RecordStream), its list gone since (it had no buffer deferred for two reclaims). The
// check before the synchronize of the context asked the lists' streams and the legacy stream
// only, missed it, and the synchronize invalidated the user's capture. Now it asks every stream
// the pool checked and has not forgotten, and refuses (cuda.ErrCapturing).
func TestFakeForgetDestroyedStreamBesideCaptureOnRecorded(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	const n = 4096
	d := r.devAlloc(n)
	u := r.stream() // non-blocking: the legacy stream does not answer for it
	kept := r.alloc(n, 0xB)
	ok(t, "RecordStream", r.pool.RecordStream(kept, pcuda.Stream(u)))
	for range 3 { // u's list, empty, leaves
		ok(t, "Trim", r.pool.Trim())
	}
	if got := pinned.StreamLists(r.pool); got != 0 {
		t.Fatalf("lists for %d streams after three reclaims with none deferred, want 0", got)
	}
	r.f.Hold(true) // the copy stays queued
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	b := r.alloc(n, 0xA)
	ok(t, "HtoDAsync", r.dev.MemcpyHtoDAsync(d, mem.Addr(b), n, s))
	ok(t, "FreeAsync", r.pool.FreeAsync(b, pcuda.Stream(s)))
	ok(t, "StreamDestroy, without ForgetStream", r.dev.StreamDestroy(s)) // its copy still queued
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ok(t, "StreamBeginCapture", r.dev.StreamBeginCapture(u, cuda.CaptureGlobal))
	ferr := r.pool.ForgetStream(pcuda.Stream(s))
	g, cerr := r.dev.StreamEndCapture(u)
	if cerr != nil {
		t.Fatalf("ForgetStream of a destroyed stream while a stream recorded on a live buffer captures invalidated the capture: %v (ForgetStream: %v)", cerr, ferr)
	}
	ok(t, "GraphDestroy", r.dev.GraphDestroy(g))
	if !errors.Is(ferr, pcuda.ErrCapturing) {
		t.Errorf("ForgetStream of a destroyed stream while a stream recorded on a live buffer captures: %v; want an error matching cuda.ErrCapturing", ferr)
	}
	ok(t, "ForgetStream once the capture has ended", r.pool.ForgetStream(pcuda.Stream(s)))
	r.f.Hold(false)
	ok(t, "Free", r.pool.Free(kept))
	ok(t, "ForgetStream", r.pool.ForgetStream(pcuda.Stream(u)))
	ok(t, "heap Free", r.heap.Free(pcuda.DevicePtr(d)))
	r.finish()
}
