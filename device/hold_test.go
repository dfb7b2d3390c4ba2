package device

import (
	"bytes"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// fill allocates blocks of n bytes on s until the heap is full, and returns them.
func fill(t *testing.T, h *Heap, n uintptr, s cuda.Stream) []cuda.DevicePtr {
	t.Helper()
	var ps []cuda.DevicePtr
	for {
		p, err := h.Alloc(int(n), pcuda.Stream(s))
		if errors.Is(err, pinmalloc.ErrOutOfMemory) || errors.Is(err, heap.ErrOutOfMemory) {
			return ps
		}
		must(t, "Alloc", err)
		ps = append(ps, uintptr(p))
	}
}

// TestFakeHoldDefersFree: a Free of a held block returns at once and frees nothing: the heap
// filled to the brim never hands the block out again, a copy into it is refused as one into a
// block with a free pending, and Close says it is live; the last Release frees it (with
// ZeroOnFree, its memset made then, after the outside work's last write), and the next filling
// gets it back.
func TestFakeHoldDefersFree(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 4 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	const n = 64 << 10
	p := alloc(t, h, n, s)
	h1, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	h2, err := h.Hold(pcuda.DevicePtr(p + 100)) // an interior pointer holds its block
	must(t, "Hold inside", err)
	if h2.Block() != pcuda.DevicePtr(p) || h2.Size() != n {
		t.Fatalf("a hold of %#x holds block %#x of %d bytes, want %#x of %d", p+100, h2.Block(), h2.Size(), p, n)
	}
	must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
	if err := h.Free(pcuda.DevicePtr(p)); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("a second Free of the held block = %v, want heap.ErrDoubleFree", err)
	}
	if err := h.HtoD(pcuda.DevicePtr(p), make([]byte, 8)); !errors.Is(err, ErrNotOwned) {
		t.Errorf("a copy into the freed held block = %v, want ErrNotOwned", err)
	}
	if st := h.Stats(); st.Live != 1 || st.Frees != 0 {
		t.Errorf("after the Free of the held block: %d live, %d frees; want 1 and 0", st.Live, st.Frees)
	}
	if err := h.Close(); !errors.Is(err, heap.ErrLiveBlocks) {
		t.Errorf("Close with a held block = %v, want heap.ErrLiveBlocks", err)
	}
	// The outside work writes the block until its end: bytes the next owner must not read.
	src := pattern(n, 0x5A)
	var pin runtime.Pinner
	pin.Pin(&src[0])
	must(t, "outside write", h.dev.MemcpyHtoD(p, mem.Addr(src), n))
	pin.Unpin()
	others := fill(t, h, n, s)
	if slices.Contains(others, p) {
		t.Fatalf("the held block %#x was handed out again after its Free", p)
	}
	if len(others) == 0 {
		t.Fatal("the heap gave nothing")
	}
	must(t, "Release", h1.Release())
	if st := h.Stats(); st.Frees != 0 {
		t.Errorf("a Release with a hold left freed the block")
	}
	must(t, "last Release", h2.Release())
	if err := h2.Release(); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("a second Release of the last hold = %v, want heap.ErrDoubleFree", err)
	}
	if st := h.Stats(); st.Live != uint64(len(others)) {
		t.Errorf("after the last Release: %d live, want %d", st.Live, len(others))
	}
	q := alloc(t, h, n, s)
	if q != p {
		t.Fatalf("the heap full but for the released block gave %#x, want %#x", q, p)
	}
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
	if !bytes.Equal(got, make([]byte, n)) {
		t.Error("ZeroOnFree: the block freed at its last Release came back with the outside work's bytes")
	}
	freeAll(t, h, append(others, q))
}

// TestFakeHoldDefersFreeAsync: a FreeAsync of a held block on another stream keeps the
// stream's order: at the last Release, the block goes on that stream's list of deferred frees,
// and is handed out again only once the stream has passed a point placed after the Release (the
// fake holds the stream's work back until then), never before, nor before the Release.
func TestFakeHoldDefersFreeAsync(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	const n = 4096
	p := alloc(t, h, n, a)
	hd, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	f.Hold(true)
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(p), 1, n, pcuda.Stream(b)))
	must(t, "FreeAsync on b of the held block", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	if st := h.Stats(); st.Deferred != 0 {
		t.Errorf("a FreeAsync of a held block was put on its stream's list before its Release: %d deferred", st.Deferred)
	}
	var live []cuda.DevicePtr
	for range 64 {
		if q := alloc(t, h, n, a); q == p {
			t.Fatal("the held block was handed out again before its Release")
		} else {
			live = append(live, q)
		}
	}
	f.CompleteStream(b) // b passes the FreeAsync; the block stays held
	for range 8 {
		if q := alloc(t, h, n, a); q == p {
			t.Fatal("the held block was handed out again before its Release, its stream idle")
		} else {
			live = append(live, q)
		}
	}
	must(t, "MemsetAsync on b again", h.MemsetAsync(pcuda.DevicePtr(live[0]), 2, n, pcuda.Stream(b)))
	must(t, "Release", hd.Release())
	if st := h.Stats(); st.Deferred != 1 {
		t.Errorf("after the last Release: %d deferred frees, want 1 (on b's list)", st.Deferred)
	}
	for range 8 {
		if q := alloc(t, h, n, a); q == p {
			t.Fatal("the block freed on b at its last Release was handed out before b passed the Release")
		} else {
			live = append(live, q)
		}
	}
	if st := h.Stats(); st.Live != uint64(len(live))+1 {
		t.Errorf("before b passed the Release: %d live, want %d (the block among them)", st.Live, len(live)+1)
	}
	f.CompleteStream(b)
	if st := h.Stats(); st.Live != uint64(len(live)) || st.Deferred != 0 {
		t.Errorf("once b passed the Release: %d live, %d deferred; want %d, 0", st.Live, st.Deferred, len(live))
	}
	f.Hold(false)
	f.Complete()
	more := fill(t, h, n, a) // the block is a's again
	if !slices.Contains(more, p) {
		t.Errorf("once b passed the Release, the heap filled to the brim never gave the block %#x back", p)
	}
	freeAll(t, h, append(live, more...))
}

// TestFakeHoldSameStreamAndForgotten: a held block freed on its own stream goes back to that
// stream's heap at its last Release, as FreeAsync would; one freed on a stream forgotten
// (ForgetStream, which synchronizes it) before the Release is freed at once, with no list made
// for the forgotten handle.
func TestFakeHoldSameStreamAndForgotten(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	a := newStream(t, dev, h)
	const n = 4096
	p := alloc(t, h, n, a)
	hd, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	must(t, "FreeAsync on its own stream", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
	must(t, "Release", hd.Release())
	if st := h.Stats(); st.Live != 0 || st.Deferred != 0 {
		t.Errorf("after the Release of a block freed on its own stream: %d live, %d deferred; want 0, 0", st.Live, st.Deferred)
	}
	if q := alloc(t, h, n, a); q != p {
		t.Errorf("a block freed on its own stream at its Release was not reused there: %#x, want %#x", q, p)
		p = q
	}

	b, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	hd, err = h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
	must(t, "ForgetStream b", h.ForgetStream(pcuda.Stream(b)))
	must(t, "StreamDestroy b", dev.StreamDestroy(b))
	must(t, "Release", hd.Release())
	if st := h.Stats(); st.Live != 0 || st.Deferred != 0 {
		t.Errorf("after the Release of a block freed on a stream forgotten since: %d live, %d deferred; want 0, 0", st.Live, st.Deferred)
	}
	must(t, "Verify", h.Verify())
}

// TestFakeHoldErrors: the refusals of Hold and Release, each with its sentinel.
func TestFakeHoldErrors(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h := newHeap(t, dev, Options{Capacity: 16 << 20})
	other := newHeap(t, dev, Options{Capacity: 16 << 20})
	s := newStream(t, dev, h)
	const n = 4096
	foreign := alloc(t, other, n, 0)
	if _, err := h.Hold(pcuda.DevicePtr(foreign)); !errors.Is(err, ErrNotOwned) || !errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("Hold of another heap's block = %v, want ErrNotOwned and heap.ErrNotOwned", err)
	}
	must(t, "Free foreign", other.Free(pcuda.DevicePtr(foreign)))
	if _, err := h.Hold(0x1000); !errors.Is(err, ErrNotOwned) || !errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("Hold of 0x1000 = %v, want ErrNotOwned and heap.ErrNotOwned", err)
	}
	p := alloc(t, h, n, s)
	keep := alloc(t, h, n, s) // the page stays, so p's slot reads as a free block
	must(t, "Free", h.Free(pcuda.DevicePtr(p)))
	if _, err := h.Hold(pcuda.DevicePtr(p)); !errors.Is(err, ErrNotOwned) || !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("Hold of a freed block = %v, want ErrNotOwned and heap.ErrDoubleFree", err)
	}
	if err := (Hold{}).Release(); !errors.Is(err, ErrNotOwned) {
		t.Errorf("Release of the zero Hold = %v, want ErrNotOwned", err)
	}

	// A hold of a block freed since and held again: its Release is refused, the new hold kept.
	p = alloc(t, h, n, s)
	old, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	must(t, "Release", old.Release())
	if err := old.Release(); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("a second Release = %v, want heap.ErrDoubleFree", err)
	}
	cur, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold again", err)
	if err := old.Release(); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("a stale Release with the block held again = %v, want heap.ErrDoubleFree", err)
	}
	// A second Release of a hold that is not the block's last is refused, and ends no other
	// holder's hold: the block, freed, waits for that one.
	second, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "second Hold", err)
	must(t, "Release of the second hold", second.Release())
	if err := second.Release(); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("a second Release of a hold not the block's last = %v, want heap.ErrDoubleFree", err)
	}
	must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
	if st := h.Stats(); st.Live != 2 {
		t.Errorf("%d live with the block's free waiting for its hold, want 2", st.Live)
	}
	if _, err := h.Hold(pcuda.DevicePtr(p)); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("Hold of a held block freed = %v, want heap.ErrDoubleFree", err)
	}
	if err := h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("FreeAsync of a held block freed = %v, want heap.ErrDoubleFree", err)
	}
	must(t, "Release", cur.Release())
	if st := h.Stats(); st.Live != 1 {
		t.Errorf("%d live after the last Release, want 1", st.Live)
	}

	// A block with a FreeAsync pending on its stream is refused.
	f.Hold(true)
	q := alloc(t, h, n, s)
	must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(q), 0, n, 0))
	must(t, "FreeAsync on the legacy stream", h.FreeAsync(pcuda.DevicePtr(q), 0))
	if _, err := h.Hold(pcuda.DevicePtr(q)); !errors.Is(err, heap.ErrDoubleFree) {
		t.Errorf("Hold of a block with a free pending = %v, want heap.ErrDoubleFree", err)
	}
	f.Hold(false)
	f.Complete()
	must(t, "Free", h.Free(pcuda.DevicePtr(keep)))
	must(t, "Sync", h.Sync())
	must(t, "ForgetStream", h.ForgetStream(pcuda.Stream(s)))
	must(t, "Close", h.Close())
	if _, err := h.Hold(pcuda.DevicePtr(p)); !errors.Is(err, ErrClosed) {
		t.Errorf("Hold after Close = %v, want ErrClosed", err)
	}
	if err := cur.Release(); !errors.Is(err, ErrClosed) {
		t.Errorf("Release after Close = %v, want ErrClosed", err)
	}
}

// TestFakeHoldClose: Close with a held block fails with heap.ErrLiveBlocks and releases
// nothing, whether the block's free waits for the hold or not; once the hold is released (and
// the block freed), Close goes through.
func TestFakeHoldClose(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h := newHeap(t, dev, Options{Capacity: 16 << 20})
	const n = 4096
	p := alloc(t, h, n, 0)
	hd, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	if err := h.Close(); !errors.Is(err, heap.ErrLiveBlocks) {
		t.Errorf("Close with a held live block = %v, want heap.ErrLiveBlocks", err)
	}
	must(t, "Free of the held block", h.Free(pcuda.DevicePtr(p)))
	if err := h.Close(); !errors.Is(err, heap.ErrLiveBlocks) {
		t.Errorf("Close with a held block freed = %v, want heap.ErrLiveBlocks", err)
	}
	must(t, "Release", hd.Release()) // the heap is open still: the free is made
	must(t, "Close", h.Close())
}

// TestFakeHoldRace: Hold, Release and Free of the same blocks from several goroutines (run
// with -race). Each block ends freed exactly once: by its Free, or by the last Release after
// it; a Hold that loses to the Free is refused with heap.ErrDoubleFree.
func TestFakeHoldRace(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	const rounds, holders = 200, 4
	for range rounds {
		p := alloc(t, h, 4096, s)
		var wg sync.WaitGroup
		errs := make(chan error, holders+1)
		start := make(chan struct{})
		for range holders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				hd, err := h.Hold(pcuda.DevicePtr(p))
				if err != nil {
					if !errors.Is(err, heap.ErrDoubleFree) {
						errs <- err
					}
					return
				}
				if err := hd.Release(); err != nil {
					errs <- err
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := h.Free(pcuda.DevicePtr(p)); err != nil {
				errs <- err
			}
		}()
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if st := h.Stats(); st.Live != 0 {
			t.Fatalf("%d blocks live after the Free and every Release", st.Live)
		}
	}
	must(t, "Verify", h.Verify())
}
