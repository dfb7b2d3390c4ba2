package pinned_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeHoldWithStreams: in a CUDAHost pool (stream-ordered reuse), a buffer held and used by
// a stream goes back only once both the last hold is released and the stream has passed its
// free, whichever comes first: a copy recorded before the hold, one recorded during it, and a
// FreeAsync made while held.
func TestFakeHoldWithStreams(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	for _, n := range holdSizes {
		d := r.devAlloc(n)
		for _, order := range []string{"copy then hold", "hold then copy", "hold, FreeAsync"} {
			r.f.Hold(true) // the stream's work stays queued
			a := r.alloc(n, 0xA1)
			var h pinned.Hold
			var err error
			if order == "copy then hold" {
				ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, pubcuda.Stream(r.s)))
				h, err = r.pool.Hold(a)
				ok(t, "Hold", err)
			} else {
				h, err = r.pool.Hold(a)
				ok(t, "Hold", err)
				ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), a, pubcuda.Stream(r.s)))
			}
			if order == "hold, FreeAsync" {
				ok(t, "FreeAsync", r.pool.FreeAsync(a, pubcuda.Stream(r.s)))
			} else {
				ok(t, "Free", r.pool.Free(a))
			}
			ok(t, "Release", h.Release())
			b := r.alloc(n, 0xB2)
			if mem.Addr(b) == mem.Addr(a) {
				t.Fatalf("%d bytes, %s: handed out again with its copy queued", n, order)
			}
			r.f.Hold(false)
			ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
			if err := r.pool.Trim(); err != nil {
				t.Fatalf("Trim: %v", err)
			}
			if st := r.pool.Stats(); st.Live != 1 {
				t.Fatalf("%d bytes, %s: %d live after the stream passed and the hold was released, want 1", n, order, st.Live)
			}
			ok(t, "Free", r.pool.Free(b))
		}
		// Held with no stream, freed, released: back at once.
		a := r.alloc(n, 0)
		h, err := r.pool.Hold(a)
		ok(t, "Hold", err)
		ok(t, "Free", r.pool.Free(a))
		ok(t, "Release", h.Release())
		if st := r.pool.Stats(); st.Live != 0 {
			t.Fatalf("%d bytes: %d live after the Release of a buffer no stream used", n, st.Live)
		}
		ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	}
	r.finish()
}

// TestFakeWaitStreams: WaitStreams waits for the copy queued into a buffer, and returns at once
// for a buffer no stream uses.
func TestFakeWaitStreams(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	const n = 64 << 10
	d := r.devAlloc(n)
	ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 0x5C, n, pubcuda.Stream(r.s)))
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	b := r.alloc(n, 0)
	ok(t, "WaitStreams of a buffer no stream used", r.pool.WaitStreams(b))
	r.f.Hold(true)
	ok(t, "DtoHAsync", r.heap.DtoHAsync(b, pubcuda.DevicePtr(d), pubcuda.Stream(r.s)))
	if b[0] != 0 {
		t.Fatal("the fake ran the copy at once")
	}
	r.f.Hold(false)
	ok(t, "WaitStreams", r.pool.WaitStreams(b[10:20]))
	if b[0] != 0x5C || b[n-1] != 0x5C {
		t.Fatal("WaitStreams returned before the queued copy landed")
	}
	ok(t, "Free", r.pool.Free(b))
	ok(t, "Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeHoldFreeAsyncCached: a held buffer freed by FreeAsync while the P's FreeAsync cache
// holds buffers of that stream (FreeAsync's fast path, written out) waits for the last Release
// too, whether a stream was recorded on it or not: it is not handed out again before.
func TestFakeHoldFreeAsyncCached(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one P: one shard, one cache
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	const n = 256
	s := pubcuda.Stream(r.s)
	for _, recorded := range []bool{false, true} {
		warm := r.alloc(n, 0)
		ok(t, "FreeAsync", r.pool.FreeAsync(warm, s)) // the cache is s's now
		a := r.alloc(n, 0xA1)
		h, err := r.pool.Hold(a)
		ok(t, "Hold", err)
		if recorded {
			ok(t, "RecordStream", r.pool.RecordStream(a, s))
		}
		ok(t, "FreeAsync", r.pool.FreeAsync(a, s))
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		if err := r.pool.Trim(); err != nil {
			t.Fatalf("Trim: %v", err)
		}
		var got [][]byte
		for range 32 {
			b := r.alloc(n, 0)
			if mem.Addr(b) == mem.Addr(a) {
				t.Fatalf("recorded %v: a held buffer freed by FreeAsync was handed out again before its Release", recorded)
			}
			got = append(got, b)
		}
		ok(t, "Release", h.Release())
		for _, b := range got {
			ok(t, "Free", r.pool.Free(b))
		}
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		if err := r.pool.Trim(); err != nil {
			t.Fatalf("Trim: %v", err)
		}
		if st := r.pool.Stats(); st.Live != 0 {
			t.Fatalf("recorded %v: %d live after the Release and the stream passed, want 0", recorded, st.Live)
		}
	}
	r.finish()
}

// TestFakeWaitStreamsForgotten: WaitStreams does not wait for a stream forgotten since its
// record (ForgetStream: it has passed the buffer) and destroyed, whose handle the driver
// refuses.
func TestFakeWaitStreamsForgotten(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{})
	if r == nil {
		return
	}
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	b := r.alloc(4096, 0)
	ok(t, "RecordStream", r.pool.RecordStream(b, pubcuda.Stream(s)))
	ok(t, "ForgetStream", r.pool.ForgetStream(pubcuda.Stream(s)))
	ok(t, "StreamDestroy", r.dev.StreamDestroy(s))
	ok(t, "WaitStreams after the stream was forgotten", r.pool.WaitStreams(b))
	ok(t, "Free", r.pool.Free(b))
	r.finish()
}

// TestFakeHoldFreeAsyncForgottenStream: a held buffer freed with FreeAsync on stream s (its free
// waits for the hold), then s forgotten (ForgetStream: s has passed its work) and destroyed,
// then the hold released. The Release used to do the FreeAsync on the destroyed handle: the
// driver refused it, Release failed, and the buffer stayed held for good, counted live, so the
// pool could not close.
func TestFakeHoldFreeAsyncForgottenStream(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	s, err := r.dev.StreamCreate(true)
	ok(t, "StreamCreate", err)
	a := r.alloc(4096, 0xA1)
	h, err := r.pool.Hold(a)
	ok(t, "Hold", err)
	ok(t, "FreeAsync", r.pool.FreeAsync(a, pubcuda.Stream(s)))
	ok(t, "ForgetStream", r.pool.ForgetStream(pubcuda.Stream(s)))
	ok(t, "StreamDestroy", r.dev.StreamDestroy(s))
	rerr := h.Release()
	_ = r.pool.Trim()
	if st := r.pool.Stats(); rerr != nil || st.Live != 0 {
		t.Fatalf("Release after the FreeAsync's stream was forgotten and destroyed: %v; %d live, %d deferred, want nil, 0 and 0", rerr, st.Live, st.Deferred)
	}
	r.finish()
}

// TestFakeHoldFreeAsyncPointRefused: the last Release of a held buffer freed with FreeAsync on
// stream s2 (a buffer of its own, or a shared one whose last reference that FreeAsync dropped)
// makes the free even when the driver refuses the next event recorded: s2's list has left the
// lists since the FreeAsync, and another stream's is the one found last. Release returns nil,
// the buffer stays until s2 has passed the copy queued before the FreeAsync (the reclaim finds
// s2's point refused and waits for the context), and then goes back. The Release checked s2
// with the driver again: the refused record was its error ("invalid stream"), and the buffer
// stayed held for good, counted live, with nothing left to free it (the shared one had no
// reference left), so the pool could not close.
func TestFakeHoldFreeAsyncPointRefused(t *testing.T) {
	for _, shared := range []bool{false, true} {
		o := pinned.Options{PurgeDelay: -1}
		s := newRefSharer()
		if shared {
			o.Sharer = s
		}
		r := newAsyncRig(t, o)
		if r == nil {
			return
		}
		const n = 4096
		s2 := r.stream()
		d := r.devAlloc(n)
		ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 0x5C, n, pubcuda.Stream(r.s)))
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		b := r.alloc(n, 0)
		if shared {
			s.share(t, r.pool, b, 1)
		}
		h, err := r.pool.Hold(b)
		ok(t, "Hold", err)
		// A copy the pool is not told of (a raw driver call): the FreeAsync orders it. It stays
		// queued: nothing asks s2 before the Release.
		ok(t, "MemcpyDtoHAsync", r.dev.MemcpyDtoHAsync(mem.Addr(b), d, n, s2))
		ok(t, "FreeAsync", r.pool.FreeAsync(b, pubcuda.Stream(s2)))
		// s2's list leaves the lists: r.s's is found last, and reclaims find s2's empty.
		c := r.alloc(n, 0)
		ok(t, "FreeAsync", r.pool.FreeAsync(c, pubcuda.Stream(r.s)))
		for range 4 {
			ok(t, "Trim", r.pool.Trim())
		}
		if k := pinned.StreamLists(r.pool); k != 0 {
			t.Fatalf("shared %v: %d streams still have lists", shared, k)
		}
		if r.f.Pending() != 1 {
			t.Fatalf("shared %v: %d streams with work queued, want 1 (s2)", shared, r.f.Pending())
		}
		r.f.Hold(true)
		r.f.FailAfter(fakecuda.CallRecord, 0, fakecuda.ResultInvalidValue)
		if err := h.Release(); err != nil {
			t.Fatalf("shared %v: Release whose FreeAsync's stream left the lists, with the next event record refused: %v", shared, err)
		}
		e := r.alloc(n, 0xB2)
		if mem.Addr(e) == mem.Addr(b) {
			t.Fatalf("shared %v: handed out again with the copy queued before its FreeAsync", shared)
		}
		_ = r.pool.Trim() // s2 busy: its point is refused, and the reclaim waits for the context
		if st := r.pool.Stats(); st.Live != 1 || st.Deferred != 0 {
			t.Fatalf("shared %v: %d live, %d deferred after the Release and a reclaim, want 1 and 0", shared, st.Live, st.Deferred)
		}
		if r.f.Pending() != 0 || !bytes.Equal(e, bytes.Repeat([]byte{0xB2}, n)) {
			t.Fatalf("shared %v: the copy queued before the FreeAsync is pending, or wrote into the next owner's buffer", shared)
		}
		ok(t, "Free", r.pool.Free(e))
		ok(t, "device Free", r.heap.Free(pubcuda.DevicePtr(d)))
		r.finish()
	}
}

// TestFakeHoldCloseRacingRelease: TestHoldCloseRacingRelease in a CUDAHost pool, with the
// buffer freed by FreeAsync: Close waits for the Release, then for the stream, and releases the
// pool's memory.
func TestFakeHoldCloseRacingRelease(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	b := r.alloc(4096, 1)
	h, err := r.pool.Hold(b)
	ok(t, "Hold", err)
	ok(t, "FreeAsync of the held buffer", r.pool.FreeAsync(b, pubcuda.Stream(r.s)))
	closeRacingRelease(t, r.pool, h, "FreeAsync")
	r.finishClosed()
}

// TestFakeWaitStreamsAfterRelease: once the pool's memory is released, WaitStreams says
// ErrClosed, as RecordStream, Hold and ForgetStream do. It used to look the address up in the
// closed arena and say ErrNotOwned ("outside the arena").
func TestFakeWaitStreamsAfterRelease(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	b := r.alloc(4096, 1)
	ok(t, "Free", r.pool.Free(b))
	ok(t, "Close", r.pool.Close())
	if err := r.pool.WaitStreams(b); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("WaitStreams after the release: %v, want ErrClosed", err)
	}
	if err := r.pool.RecordStream(b, 0); !errors.Is(err, pinned.ErrClosed) {
		t.Errorf("RecordStream after the release: %v, want ErrClosed", err)
	}
}

// TestFakeHoldReleaseRacingFree: TestHoldReleaseRacingFree in a CUDAHost pool, whose held
// buffers are tagged held for no stream, or recorded on one: a Free, FreeAsync or Hold that
// runs while the last Release makes the deferred Free or FreeAsync is refused with
// ErrDoubleFree, and the buffer goes back once. The racing Free used to find the buffer held
// for no stream and free it at once.
func TestFakeHoldReleaseRacingFree(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	s := pubcuda.Stream(r.s)
	for _, n := range []int{256, 64 << 10, 3 << 20} {
		for _, deferred := range []string{"Free", "FreeAsync"} {
			for _, recorded := range []bool{false, true} {
				for _, racer := range []string{"Free", "FreeAsync", "Hold"} {
					what := fmt.Sprintf("%d bytes, %s deferred, recorded %v, racing %s", n, deferred, recorded, racer)
					b := r.alloc(n, 0xA1)
					h, err := r.pool.Hold(b)
					ok(t, "Hold", err)
					if recorded {
						ok(t, "RecordStream", r.pool.RecordStream(b, s))
					}
					if deferred == "Free" {
						ok(t, "Free of the held buffer", r.pool.Free(b))
					} else {
						ok(t, "FreeAsync of the held buffer", r.pool.FreeAsync(b, s))
					}
					errc := inRelease(t, func() error {
						switch racer {
						case "Hold":
							_, err := r.pool.Hold(b)
							return err
						case "FreeAsync":
							return r.pool.FreeAsync(b, s)
						}
						return r.pool.Free(b)
					})
					if err := h.Release(); err != nil {
						t.Fatalf("%s: Release: %v", what, err)
					}
					if err := <-errc; !errors.Is(err, pinned.ErrDoubleFree) {
						t.Fatalf("%s: the racer during the last Release's free: %v, want ErrDoubleFree", what, err)
					}
					ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
					ok(t, "Trim", r.pool.Trim())
					if st := r.pool.Stats(); st.Live != 0 || st.Deferred != 0 {
						t.Fatalf("%s: %d live, %d deferred after the Release and the stream, want 0 and 0", what, st.Live, st.Deferred)
					}
					c := r.alloc(n, 0)
					ok(t, "FreeAsync", r.pool.FreeAsync(c, s))
				}
			}
		}
	}
	r.finish()
}

// TestFakeCloseDuringReleaseWait: a Close while the last Release of a held buffer freed with
// FreeAsync finishes the close of the pool, waiting for the buffer's stream (a copy the fake
// holds queued there), does not wait for that Release: it counts the buffer as deferred, as it
// is, and waits for the stream in its own drain, then releases the pool's memory. The Release
// read-held the holds table's counting lock through its wait (up to 5 s), and the Close waited
// for the lock that long.
func TestFakeCloseDuringReleaseWait(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	defer pinned.SetCloseWait(pinned.SetCloseWait(time.Minute))
	s := pubcuda.Stream(r.s)
	d := r.devAlloc(4096)
	b := r.alloc(4096, 7)
	h, err := r.pool.Hold(b)
	ok(t, "Hold", err)
	r.f.Hold(true) // the copy stays queued on s until a hook lets it run
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, s))
	ok(t, "FreeAsync of the held buffer", r.pool.FreeAsync(b, s))
	if err := r.pool.Close(); !errors.Is(err, pinned.ErrBusy) {
		t.Fatalf("Close with a buffer freed while held: %v, want ErrBusy", err)
	}
	inFinish := make(chan struct{})
	var once sync.Once
	var waited atomic.Bool
	defer pinned.SetAfterPoll(func() { once.Do(func() { close(inFinish) }) })()
	defer pinned.SetReleaseHooks(nil, func() {
		waited.Store(true) // Close waits for the Release: let its wait end
		r.f.Hold(false)
	})()
	defer pinned.SetAfterCloseCount(func() { r.f.Hold(false) })()
	relErr := make(chan error, 1)
	go func() { relErr <- h.Release() }()
	<-inFinish // the Release's first reclaim, finishing the close: its wait follows
	closeErr := r.pool.Close()
	ok(t, "Release", <-relErr)
	if waited.Load() {
		t.Error("Close waited for the lock a last Release held while it waited for its buffer's stream")
	}
	if closeErr != nil {
		t.Errorf("Close during the Release's wait: %v, want nil", closeErr)
	}
	ok(t, "heap Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finishClosed()
}

// TestFakeHoldBetweenGuardedFreeLooks: in a ZeroOnFree CUDAHost pool, a Hold that takes a buffer
// between its Free's look at the holds and the Free's claim defers the Free to the Hold's
// Release, as a Hold before the Free does, for a buffer no stream was recorded on and for one
// recorded on a stream: the buffer stays live and unscrubbed while held, and the Release frees
// it. The Free freed it at once (scrubbed, and free for the next Alloc) or behind its stream
// only, while the Hold's work still used it.
func TestFakeHoldBetweenGuardedFreeLooks(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{ZeroOnFree: true, PurgeDelay: -1})
	if r == nil {
		return
	}
	for _, recorded := range []bool{false, true} {
		b := r.alloc(4096, 7)
		if recorded {
			ok(t, "RecordStream", r.pool.RecordStream(b, pubcuda.Stream(r.s)))
		}
		var h pinned.Hold
		var herr error
		restore := pinned.SetAfterHoldsLook(func() { h, herr = r.pool.Hold(b) })
		err := r.pool.Free(b)
		restore()
		ok(t, "Hold between the Free's looks", herr)
		ok(t, "Free of a buffer held meanwhile", err)
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		if st := r.pool.Stats(); st.Live != 1 || b[0] != 7 || b[4095] != 7 {
			t.Fatalf("recorded %v: a Free deferred to a Hold: %d live, bytes %d %d; want 1 live, 7 7",
				recorded, st.Live, b[0], b[4095])
		}
		ok(t, "Release", h.Release())
		ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
		if st := r.pool.Stats(); st.Live != 0 {
			t.Fatalf("recorded %v: the Release left %d live", recorded, st.Live)
		}
	}
	r.finish()
}
