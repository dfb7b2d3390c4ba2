package pinned_test

import (
	"sync/atomic"
	"testing"
	"time"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeWaitStreamsDuringFreeClaim: a Hold of a buffer recorded on a stream comes between its
// Free's look at the holds and the Free's claim of its tag, so the Free is deferred to the
// Hold's Release; a WaitStreams of the held buffer made while the claim looks at the holds
// waits for the copy queued into it. The claim published tagNone there (and put the tag back
// after): the WaitStreams saw no stream and returned before the copy landed, and the holder
// then read bytes the copy was still writing.
func TestFakeWaitStreamsDuringFreeClaim(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{ZeroOnFree: true, PurgeDelay: -1}) // Free takes no fast section
	if r == nil {
		return
	}
	const n = 4096
	d := r.devAlloc(n)
	ok(t, "MemsetAsync", r.heap.MemsetAsync(pubcuda.DevicePtr(d), 0x5C, n, pubcuda.Stream(r.s)))
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	b := r.alloc(n, 0)
	r.f.Hold(true) // the copy stays queued until a synchronize
	ok(t, "DtoHAsync", r.heap.DtoHAsync(b, pubcuda.DevicePtr(d), pubcuda.Stream(r.s)))
	var h pinned.Hold
	var herr, werr error
	var held, looked, early bool
	waited := make(chan struct{})
	restore := pinned.SetClaimHooks(func(*atomic.Uintptr) {
		if !held {
			held = true
			h, herr = r.pool.Hold(b)
		}
	}, func(*atomic.Uintptr) {
		if looked {
			return
		}
		looked = true
		go func() {
			werr = r.pool.WaitStreams(b)
			early = b[0] != 0x5C || b[n-1] != 0x5C
			close(waited)
		}()
		select {
		case <-waited:
		case <-time.After(100 * time.Millisecond):
		}
	})
	err := r.pool.Free(b)
	restore()
	<-waited
	ok(t, "Hold between the Free's look at the holds and its claim", herr)
	ok(t, "Free of a buffer held meanwhile", err)
	ok(t, "WaitStreams", werr)
	if !looked {
		t.Fatal("the Free made no claim that looked at the holds")
	}
	if early {
		t.Fatal("WaitStreams of a held buffer returned before the copy queued into it landed")
	}
	if st := r.pool.Stats(); st.Live != 1 {
		t.Fatalf("a Free deferred to a Hold: %d live, want 1", st.Live)
	}
	ok(t, "Release", h.Release())
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if st := r.pool.Stats(); st.Live != 0 {
		t.Fatalf("the Release left %d live", st.Live)
	}
	ok(t, "device Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}

// TestFakeFreeClaimInFastSectionBesideHold: Free's fast section claims the tag of a buffer
// recorded on one stream while a Hold counts itself, and that Hold (or a record) finds the tag
// claimed and locks it for a moment. The claim gives the tag back without waiting for anyone:
// it runs pinned to its P, where a wait is a fatal error of the runtime ("schedule: holding
// locks") or, for one that spins, a P that never lets the locker run. It waited for the locker
// with runtime.Gosched, in the section.
func TestFakeFreeClaimInFastSectionBesideHold(t *testing.T) {
	r := newAsyncRig(t, pinned.Options{PurgeDelay: -1})
	if r == nil {
		return
	}
	if !pinned.FastPaths(r.pool) {
		t.Skip("this build has no fast sections")
	}
	const n = 4096
	d := r.devAlloc(n)
	b := r.alloc(n, 7)
	r.f.Hold(true)
	ok(t, "HtoDAsync", r.heap.HtoDAsync(pubcuda.DevicePtr(d), b, pubcuda.Stream(r.s)))
	var counted, locked bool
	restore := pinned.SetClaimHooks(func(*atomic.Uintptr) {
		if !counted {
			counted = true
			pinned.CountHolds(r.pool, 1) // a Hold, after the free's look at the holds
		}
	}, func(tag *atomic.Uintptr) {
		// The Hold reads the tag; where it reads tagNone it locks it until it finds the
		// buffer held (holdUnrecorded), which takes it a moment here.
		if !locked && tag.CompareAndSwap(pinned.TagNone, pinned.TagLocked) {
			locked = true
			go func() {
				time.Sleep(10 * time.Millisecond)
				tag.Store(pinned.TagNone)
			}()
		}
	})
	err := r.pool.Free(b)
	restore()
	pinned.CountHolds(r.pool, -1)
	ok(t, "Free of a recorded buffer beside a Hold", err)
	if !counted {
		t.Fatal("the Free made no claim")
	}
	r.f.Hold(false)
	ok(t, "StreamSynchronize", r.dev.StreamSynchronize(r.s))
	if st := r.pool.Stats(); st.Live != 0 {
		t.Fatalf("%d live after the stream passed the Free, want 0", st.Live)
	}
	ok(t, "device Free", r.heap.Free(pubcuda.DevicePtr(d)))
	r.finish()
}
