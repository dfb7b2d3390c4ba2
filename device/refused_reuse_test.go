package device

import (
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// refusedReuse is the state refusedHandleReused leaves: stream A, seen by the heap, destroyed
// without ForgetStream with a copy queued (held) that reads mine, a block A freed (FreeAsync on
// A: back in A's heap at once); a poll found A's handle refused while a capture on another
// stream put off the synchronize of the context (Recover), and parked A; and the driver gave
// A's handle to a new stream b.
type refusedReuse struct {
	f          *fakecuda.Driver
	dev        *cuda.Device
	h          *Heap
	b          cuda.Stream    // the new stream, on A's handle
	d          cuda.Stream    // a stream of the heap's without a heap yet: it takes from the arena
	mine       cuda.DevicePtr // A's block, freed on A behind its copy
	sa         *heap.Heap     // A's heap
	dst        cuda.DevicePtr // raw memory (not the heap's) that A's copy writes
	want       []byte         // mine's bytes when A queued its copy
	keep       cuda.DevicePtr // a block of the capturing stream's (0: freed)
	endCapture func()
}

// refusedReuseSize is the size of A's block and of the blocks overwrite allocates.
const refusedReuseSize = 64 << 10

// refusedFinder is the call in which the heap finds A's handle refused.
type refusedFinder int

const (
	byPoll  refusedFinder = iota // Stats' poll of A's deferred free of another stream's block
	byTrim                       // Trim's synchronize of A, whose heap holds memory
	byPurge                      // the idle purge's point on A, whose heap went quiet
)

// refusedHandleReused sets up a refusedReuse on the fake (nil in the test process), on a heap
// whose idle purge the test ticks (purgeTick) and whose arena purges nothing meanwhile; the
// heap finds A refused by find.
func refusedHandleReused(t *testing.T, find refusedFinder) *refusedReuse {
	t.Helper()
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: time.Hour})
	if f == nil {
		return nil
	}
	h.mu.Lock()
	h.purge.manual = true
	h.mu.Unlock()
	r := &refusedReuse{f: f, dev: dev, h: h}
	a, c := newStream(t, dev, h), newStream(t, dev, h)
	r.d = newStream(t, dev, h)
	r.keep = alloc(t, h, 4096, c) // c has a heap: the heap sees its capture
	const n = refusedReuseSize
	A, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	r.mine = alloc(t, h, n, A)
	theirs := alloc(t, h, n, a)
	r.want = pattern(n, 0x3A)
	must(t, "HtoD", h.HtoD(pcuda.DevicePtr(r.mine), r.want))
	r.dst, err = dev.MemAlloc(n)
	must(t, "MemAlloc", err)
	t.Cleanup(func() { must(t, "MemFree", dev.MemFree(r.dst)) })
	must(t, "synchronize the context", dev.Synchronize()) // the heap's check of A, run
	h.mu.Lock()
	r.sa = h.streams[pcuda.Stream(A)]
	h.mu.Unlock()

	f.Hold(true)
	must(t, "MemcpyDtoDAsync on A", dev.MemcpyDtoDAsync(r.dst, r.mine, n, A)) // held: reads mine
	must(t, "FreeAsync on A", h.FreeAsync(pcuda.DevicePtr(r.mine), pcuda.Stream(A)))
	if find == byPoll {
		must(t, "FreeAsync on A", h.FreeAsync(pcuda.DevicePtr(theirs), pcuda.Stream(A))) // deferred
	} else {
		must(t, "Free", h.Free(pcuda.DevicePtr(theirs)))
	}
	must(t, "StreamDestroy, without ForgetStream", dev.StreamDestroy(A))

	ended := false
	r.endCapture = func() {
		t.Helper()
		if ended {
			return
		}
		ended = true
		g, err := dev.StreamEndCapture(c)
		runtime.UnlockOSThread()
		if err != nil {
			t.Fatalf("the heap invalidated the user's capture: %v", err)
		}
		must(t, "GraphDestroy", dev.GraphDestroy(g))
	}
	t.Cleanup(func() { // before the streams' and the heap's cleanups
		r.endCapture()
		f.Hold(false)
		f.Complete()
		if r.keep != 0 && !h.closed {
			freeAll(t, h, []cuda.DevicePtr{r.keep})
		}
		if r.b != 0 {
			if !h.closed {
				must(t, "ForgetStream of b", h.ForgetStream(pcuda.Stream(r.b)))
			}
			must(t, "StreamDestroy of b", dev.StreamDestroy(r.b))
		}
	})
	runtime.LockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(c, cuda.CaptureGlobal))
	switch find { // the heap finds A's handle refused; the capture puts off the synchronize
	case byPoll:
		h.Stats()
	case byTrim:
		t.Logf("Trim: %v", h.Trim())
	case byPurge:
		for range 4 {
			h.purgeTick()
		}
	}
	h.mu.Lock()
	parked, lost := h.parkedAs(pcuda.Stream(A)), h.lists.Lost()
	h.mu.Unlock()
	wantLost := 0 // A's deferred free's list, when it has one, waits for Recover: lost
	if find == byPoll {
		wantLost = 1
	}
	if !parked || lost != wantLost || f.Pending() == 0 {
		t.Fatalf("after the heap found A refused: A parked %v, %d lists lost, %d streams with work; want A parked, %d lost, A's copy held",
			parked, lost, f.Pending(), wantLost)
	}
	r.b, err = dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	if r.b != A {
		t.Fatalf("the driver gave the new stream %#x, not A's handle %#x: the test proves nothing", r.b, A)
	}
	return r
}

// keptByA checks that A's heap still holds its segment (the one mine is in) after what.
func (r *refusedReuse) keptByA(t *testing.T, what string) {
	t.Helper()
	r.h.mu.Lock()
	segs := r.sa.Stats().Segments
	r.h.mu.Unlock()
	if segs == 0 {
		t.Errorf("after %s, A's heap gave its memory away with A's copy still queued", what)
	}
}

// overwrite allocates blocks on s until the heap runs out of memory (an Alloc that reclaims:
// it synchronizes each stream whose heap holds memory), writes every one on s, and runs s's
// work, while A's copy is held: a block of memory A's copy reads is overwritten before the copy
// runs. It returns the blocks, which the caller frees.
func (r *refusedReuse) overwrite(t *testing.T, s cuda.Stream) []cuda.DevicePtr {
	t.Helper()
	var ps []cuda.DevicePtr
	for range 1024 {
		p, err := r.h.Alloc(refusedReuseSize, pcuda.Stream(s))
		if errors.Is(err, ErrOutOfMemory) {
			break
		}
		must(t, "Alloc", err)
		must(t, "MemsetAsync", r.h.MemsetAsync(p, 0xEE, refusedReuseSize, pcuda.Stream(s)))
		ps = append(ps, cuda.DevicePtr(p))
	}
	if len(ps) == 0 || len(ps) == 1024 {
		t.Fatalf("overwrite got %d blocks on stream %#x: want some, then out of memory", len(ps), s)
	}
	r.f.CompleteStream(s)
	return ps
}

// check ends the capture, runs every stream's work, A's copy among it, and checks every byte
// the copy wrote: mine's bytes as A left them, not those of a later owner.
func (r *refusedReuse) check(t *testing.T, what string, ps []cuda.DevicePtr) {
	t.Helper()
	r.endCapture()
	r.f.Hold(false)
	r.f.Complete()
	must(t, "synchronize the context", r.dev.Synchronize())
	got := make([]byte, refusedReuseSize)
	must(t, "MemcpyDtoH", r.dev.MemcpyDtoH(uintptr(unsafe.Pointer(&got[0])), r.dst, refusedReuseSize))
	if i := firstDiff(got, r.want); i >= 0 {
		t.Errorf("after %s, A's copy read %#x at byte %d of the block A freed, not %#x: "+
			"the block changed owner while A's copy was queued", what, got[i], i, r.want[i])
	}
	if !r.h.closed {
		freeAll(t, r.h, ps)
	}
}

// TestFakeRefusedReusedHandleAlloc and the tests below: a refusedReuse (A destroyed without
// ForgetStream, its copy of the block it freed held, its handle found refused while a capture
// put Recover off, then given to the new stream b). A's block, and the segment of A's heap it is
// in, must not change owner before a synchronize of the context has passed A's copy, whatever
// the heap does with the handle meanwhile: b allocates (it must not get A's block), b is
// forgotten, Trim, the idle purge, Close; each test then fills the heap on another stream (an
// Alloc out of memory: reclaim) and checks every byte A's copy read.
// newStreamAllocates is a refusedReuse found by find, where b allocates: it must not get A's
// block, and its writes must not reach what A's copy reads.
func newStreamAllocates(t *testing.T, find refusedFinder) {
	r := refusedHandleReused(t, find)
	if r == nil {
		return
	}
	pb := alloc(t, r.h, refusedReuseSize, r.b)
	if pb == r.mine {
		t.Errorf("b's Alloc got the block A freed behind its copy, still queued")
	}
	must(t, "Free", r.h.Free(pcuda.DevicePtr(pb)))
	r.keptByA(t, "b's Alloc")
	r.check(t, "b's allocations", r.overwrite(t, r.b))
}

func TestFakeRefusedReusedHandleAlloc(t *testing.T) { newStreamAllocates(t, byPoll) }

func TestFakeRefusedReusedHandleFoundByTrim(t *testing.T) { newStreamAllocates(t, byTrim) }

func TestFakeRefusedReusedHandleFoundByPurge(t *testing.T) { newStreamAllocates(t, byPurge) }

func TestFakeRefusedReusedHandleForget(t *testing.T) {
	r := refusedHandleReused(t, byPoll)
	if r == nil {
		return
	}
	t.Logf("ForgetStream of b during the capture: %v", r.h.ForgetStream(pcuda.Stream(r.b)))
	r.keptByA(t, "ForgetStream of b")
	r.check(t, "ForgetStream of b", r.overwrite(t, r.d))
}

func TestFakeRefusedReusedHandleTrim(t *testing.T) {
	r := refusedHandleReused(t, byPoll)
	if r == nil {
		return
	}
	t.Logf("Trim during the capture: %v", r.h.Trim())
	r.keptByA(t, "Trim")
	r.check(t, "Trim", r.overwrite(t, r.d))
}

func TestFakeRefusedReusedHandleReclaim(t *testing.T) {
	r := refusedHandleReused(t, byPoll)
	if r == nil {
		return
	}
	ps := r.overwrite(t, r.d)
	r.keptByA(t, "an Alloc out of memory")
	r.check(t, "an Alloc out of memory", ps)
}

func TestFakeRefusedReusedHandlePurge(t *testing.T) {
	r := refusedHandleReused(t, byPoll)
	if r == nil {
		return
	}
	for range 4 {
		r.h.purgeTick()
	}
	r.keptByA(t, "the idle purge")
	r.check(t, "the idle purge", r.overwrite(t, r.d))
}

func TestFakeRefusedReusedHandleClose(t *testing.T) {
	r := refusedHandleReused(t, byPoll)
	if r == nil {
		return
	}
	freeAll(t, r.h, []cuda.DevicePtr{r.keep})
	r.keep = 0
	if err := r.h.Close(); !errors.Is(err, ErrBusy) {
		t.Errorf("Close during the capture: %v; want ErrBusy", err)
	}
	var ps []cuda.DevicePtr
	if !r.h.closed {
		r.keptByA(t, "Close")
		ps = r.overwrite(t, r.d)
	}
	r.check(t, "Close", ps)
}
