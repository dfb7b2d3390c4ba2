package device

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeZeroOnFree: a block freed on its own stream (reused at once), on another stream
// (reused after the event) or synchronously reads zero when it is handed out again.
func TestFakeZeroOnFree(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, ZeroOnFree: true})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	nextOwnerReadsZero(t, dev, h, a, b, 4096, 4096, "the block")
}

func TestFakeQuota(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, Quota: 1 << 20})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	p := alloc(t, h, 768<<10, s)
	if _, err := h.Alloc(512<<10, pcuda.Stream(s)); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc past the quota: %v", err)
	}
	q := alloc(t, h, 256<<10, s) // exactly the quota
	if _, err := h.Alloc(1, pcuda.Stream(s)); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc at the quota: %v", err)
	}
	f.Hold(true)
	// The default stream uses p, then frees it: deferred, it counts until done.
	must(t, "MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(p), 0, 768<<10, 0))
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), 0))
	if _, err := h.Alloc(512<<10, pcuda.Stream(s)); !errors.Is(err, ErrQuota) {
		t.Fatalf("Alloc with a deferred free pending: %v", err)
	}
	f.Complete()
	f.Hold(false)
	must(t, "Sync", h.Sync())
	r := alloc(t, h, 512<<10, s)
	freeAll(t, h, []cuda.DevicePtr{q, r})
}

// TestFakeZeroOnFreeDuringCapture: with ZeroOnFree, a free whose memset would be queued on a
// stream a CUDA graph capture holds (the freeing stream; the legacy stream, for Free and for a
// FreeAsync on it, while a blocking stream captures) is refused with an error matching
// cuda.ErrCapturing before anything is queued or freed: the capture stays valid, the block stays
// live, and once freed after the capture it reads zero when handed out again. Before, a
// FreeAsync's memset was captured into the user's graph, so it did not run before the block was
// reused (the next owner read the last one's bytes) and would clear the block, reused since, at
// every launch of the graph; Free's memset on the legacy stream failed and ended the capture.
func TestFakeZeroOnFreeDuringCapture(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, ZeroOnFree: true, PurgeDelay: -1})
	if f == nil {
		return
	}
	s, b, blocking := newStream(t, dev, h), newStream(t, dev, h), newBlockingStream(t, dev, h)
	secret := bytes.Repeat([]byte{0x5A}, 4096)
	for _, c := range []struct {
		how            string
		capture, frees cuda.Stream // frees 0 with capture blocking: Free, or FreeAsync on the legacy stream
		sync           bool
	}{
		{"FreeAsync on its own stream, capturing", s, s, false},
		{"FreeAsync on another stream, capturing", b, b, false},
		{"FreeAsync on the legacy stream, a blocking stream capturing", blocking, 0, false},
		{"Free, a blocking stream capturing", blocking, 0, true},
	} {
		p := alloc(t, h, 4096, s)
		must(t, "HtoD", h.HtoD(pcuda.DevicePtr(p), secret))
		runtime.LockOSThread()
		must(t, "StreamBeginCapture", dev.StreamBeginCapture(c.capture, cuda.CaptureGlobal))
		var err error
		if c.sync {
			err = h.Free(pcuda.DevicePtr(p))
		} else {
			err = h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(c.frees))
		}
		g, cerr := dev.StreamEndCapture(c.capture)
		runtime.UnlockOSThread()
		if cerr != nil {
			t.Errorf("%s: the free invalidated the user's capture: %v", c.how, cerr)
		} else {
			must(t, "GraphDestroy", dev.GraphDestroy(g))
		}
		if !errors.Is(err, pcuda.ErrCapturing) {
			t.Errorf("%s: %v, want an error matching cuda.ErrCapturing", c.how, err)
		}
		if err != nil { // refused: still live, freed now that the capture has ended
			must(t, "FreeAsync after the capture", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
		}
		must(t, "Sync", h.Sync())
		q := alloc(t, h, 4096, s)
		if q != p {
			t.Fatalf("%s: block not reused (%#x, then %#x): the test proves nothing", c.how, p, q)
		}
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		got := make([]byte, 4096)
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
		if !bytes.Equal(got, make([]byte, 4096)) {
			t.Errorf("%s: the next user of the block reads the last one's data", c.how)
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(q)))
	}
}

// TestFakeZeroOnFreeClearsWholeBlock: with ZeroOnFree, a block's bytes past the size asked for,
// up to the block's extent (its size class's rounding), are cleared at the free too: a tenant's
// kernel that writes there, within its block (no fault: the memory is the block's), leaves
// nothing for the next owner, who may ask for the whole extent. Before, the memset cleared the
// size asked for alone, and the next owner read the rest.
func TestFakeZeroOnFreeClearsWholeBlock(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, ZeroOnFree: true, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	const n = 4000
	p := alloc(t, h, n, a)
	ext, err := h.g.Extent(uintptr(p))
	must(t, "Extent", err)
	must(t, "Free", h.Free(pcuda.DevicePtr(p)))
	if ext <= n {
		t.Fatalf("a %d-byte block covers %d bytes: no slack, the test proves nothing", n, ext)
	}
	nextOwnerReadsZero(t, dev, h, a, b, n, ext, "its slack")
}

// nextOwnerReadsZero allocates n bytes on stream a, has the tenant's kernel write reach bytes
// there (past n: what the block's memory holds beyond the size asked), frees the block in each
// of the three ways (FreeAsync on a, on b, Free), and checks that the next owner, asking for
// reach bytes, gets the same memory and reads zero: what names what was not cleared.
func nextOwnerReadsZero(t *testing.T, dev *cuda.Device, h *Heap, a, b cuda.Stream, n, reach uintptr, what string) {
	t.Helper()
	for _, how := range []string{"FreeAsync same stream", "FreeAsync other stream", "Free"} {
		p := alloc(t, h, n, a)
		must(t, "MemsetD8", dev.MemsetD8(p, 0x5A, reach))
		must(t, "synchronize the legacy stream", dev.StreamSynchronize(0))
		switch how {
		case "FreeAsync same stream":
			must(t, how, h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(a)))
		case "FreeAsync other stream":
			must(t, how, h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
			must(t, "Sync", h.Sync())
		case "Free":
			must(t, how, h.Free(pcuda.DevicePtr(p)))
		}
		q := alloc(t, h, reach, a) // the next owner asks for the whole reach
		if q != p {
			t.Fatalf("%s: memory not reused (%#x, then %#x): the test proves nothing", how, p, q)
		}
		must(t, "StreamSynchronize", dev.StreamSynchronize(a))
		got := make([]byte, reach)
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
		if i := firstDiff(got, make([]byte, reach)); i >= 0 {
			t.Errorf("%s: the next owner reads %#x at byte %d of %d (the last one asked for %d): %s was not cleared", how, got[i], i, reach, n, what)
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(q)))
	}
}

// TestFakeZeroOnFreeClearsHugeGranule: with ZeroOnFree, a huge block's bytes past the size
// asked for, to the end of the granule its last byte lies in, are cleared at the free too. The
// granule is committed whole (2 MiB here), so a tenant's kernel writing past its size there
// does not fault; the block goes back to the arena at the free, and the next Alloc over the same
// chunks, asking for more, got that granule as it was (committed still: the purge had not run)
// and read the last owner's bytes. Before, Extent was the size asked (a huge block's page is
// its span, which the arena sizes as asked), and the memset stopped there.
func TestFakeZeroOnFreeClearsHugeGranule(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, ZeroOnFree: true, PurgeDelay: -1})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	const n, reach = 3<<20 + 4000, 4 << 20 // 3 MiB and a bit: two 2 MiB granules committed
	nextOwnerReadsZero(t, dev, h, a, b, n, reach, "its last granule")
}
