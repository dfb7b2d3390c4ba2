package device

import (
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeRefusedReusedHandleParksOnce and TestFakeRefusedReusedHandlePurgeParksOnce: the heap
// that finds A's handle refused while a capture puts off the synchronize of the context parks
// A's heap once. The new stream b, which the driver gave A's handle, then allocates from a heap
// of its own: a later poll of the deferred frees (each Alloc's) or purge tick that meets the
// same refusal, still unanswered, must not park b's heap too, leaving b a fresh heap (and a
// fresh segment of the arena) per Alloc until the capture ends: the heap ran out of memory
// after a few 4 KiB Allocs.
func TestFakeRefusedReusedHandleParksOnce(t *testing.T) { parksOnce(t, byPoll) }

func TestFakeRefusedReusedHandlePurgeParksOnce(t *testing.T) { parksOnce(t, byPurge) }

// parksOnce is a refusedReuse found by find, where b allocates 8 small blocks (with a purge
// tick after each when the purge found A): they must share one heap, and A's stay the one
// heap parked.
func parksOnce(t *testing.T, find refusedFinder) {
	r := refusedHandleReused(t, find)
	if r == nil {
		return
	}
	const n = 8
	ps := make([]cuda.DevicePtr, 0, n)
	for range n {
		ps = append(ps, alloc(t, r.h, 4096, r.b))
		if find == byPurge {
			r.h.purgeTick()
		}
	}
	r.h.mu.Lock()
	parked := r.h.parkedHeaps()
	owners := map[any]bool{}
	for _, p := range ps {
		o, err := r.h.g.Owner(uintptr(p))
		must(t, "Owner", err)
		owners[o] = true
	}
	r.h.mu.Unlock()
	if parked != 1 || len(owners) != 1 {
		t.Errorf("after %d Allocs of 4 KiB on b during the capture: %d heaps parked, b's blocks in %d heaps; want A's heap parked alone, b's blocks in one heap",
			n, parked, len(owners))
	}
	freeAll(t, r.h, ps)
	r.keptByA(t, "b's Allocs")
	r.check(t, "b's Allocs", nil)
}

// TestFakeRefusedHeaplessHandleParksNothingLater: as TestFakeRefusedReusedHandleParksOnce,
// where A never allocated (it only freed another stream's block, deferred on it): the heap
// found refused under A's handle is none, and the new stream b's heap, made since, must not be
// parked at each later poll that meets the same refusal, still unanswered. Before, nothing was
// parked for A, so each poll parked b's newest heap.
func TestFakeRefusedHeaplessHandleParksNothingLater(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	keep := alloc(t, h, 4096, c) // c has a heap: the heap sees its capture
	theirs := alloc(t, h, 4096, a)
	A, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	f.Hold(true)
	must(t, "MemsetAsync on A", h.MemsetAsync(pcuda.DevicePtr(theirs), 0, 4096, pcuda.Stream(A)))
	must(t, "FreeAsync on A", h.FreeAsync(pcuda.DevicePtr(theirs), pcuda.Stream(A))) // deferred
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(A))
	runtime.LockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	var b cuda.Stream
	defer func() {
		g, err := dev.StreamEndCapture(c)
		runtime.UnlockOSThread()
		must(t, "StreamEndCapture", err)
		must(t, "GraphDestroy", dev.GraphDestroy(g))
		f.Hold(false)
		f.Complete()
		freeAll(t, h, []cuda.DevicePtr{keep})
		if b != 0 {
			must(t, "ForgetStream of b", h.ForgetStream(pcuda.Stream(b)))
			must(t, "StreamDestroy of b", dev.StreamDestroy(b))
		}
	}()
	h.Stats() // its poll finds A's handle refused; the capture puts Recover off
	if b, err = dev.StreamCreate(true); err != nil || b != A {
		t.Fatalf("StreamCreate: %#x, %v; want A's handle %#x", b, err, A)
	}
	const n = 8
	ps := make([]cuda.DevicePtr, 0, n)
	for range n {
		ps = append(ps, alloc(t, h, 4096, b)) // each polls: A's free is still deferred
	}
	h.mu.Lock()
	parked := h.parkedHeaps()
	owners := map[any]bool{}
	for _, p := range ps {
		o, err := h.g.Owner(uintptr(p))
		must(t, "Owner", err)
		owners[o] = true
	}
	h.mu.Unlock()
	if parked != 0 || len(owners) != 1 {
		t.Errorf("after %d Allocs of 4 KiB on b during the capture: %d heaps parked, b's blocks in %d heaps; want none parked (A had none), b's blocks in one heap",
			n, parked, len(owners))
	}
	freeAll(t, h, ps)
}
