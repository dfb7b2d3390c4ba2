package device

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeSyncCopyAfterSameStreamReuse: a block freed on its non-blocking stream s is handed at
// once to the next Alloc on s, while the work that used it is still queued there; a synchronous
// copy into the new block (HtoD, DtoD), which the driver runs on the legacy stream, must come
// after that work, or the old owner's late copy overwrites the new owner's bytes. Before, the
// synchronous copies ordered nothing after s: the fake, holding s's work until s was
// synchronized, ran the old owner's copy after HtoD had returned, and the block read back the
// old owner's bytes.
func TestFakeSyncCopyAfterSameStreamReuse(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	s := newStream(t, dev, h)
	const n = 4096
	src := alloc(t, h, n, s)
	must(t, "HtoD", h.HtoD(pcuda.DevicePtr(src), pattern(n, 7)))
	for _, via := range []string{"HtoD", "DtoD"} {
		f.Hold(true)
		p := alloc(t, h, n, s)
		old := bytes.Repeat([]byte{0xDE}, n) // the old owner's copy, held
		must(t, "HtoDAsync", h.HtoDAsync(pcuda.DevicePtr(p), old, pcuda.Stream(s)))
		must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
		q := alloc(t, h, n, s)
		if q != p {
			t.Fatalf("%s: the block freed on s was not reused at once (%#x, then %#x)", via, p, q)
		}
		want := pattern(n, 7)
		if via == "HtoD" {
			want = pattern(n, 3)
			must(t, "HtoD", h.HtoD(pcuda.DevicePtr(q), want))
		} else {
			must(t, "DtoD", h.DtoD(pcuda.DevicePtr(q), pcuda.DevicePtr(src), n))
		}
		f.Hold(false)
		must(t, "StreamSynchronize", dev.StreamSynchronize(s)) // runs what s still had queued
		got := make([]byte, n)
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
		if !bytes.Equal(got, want) {
			i := firstDiff(got, want)
			t.Errorf("%s into a block reused on its stream: byte %d reads %#x, want %#x: "+
				"the old owner's copy, queued on s, ran after it", via, i, got[i], want[i])
		}
		must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(s)))
	}
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(src), pcuda.Stream(s)))
}

// TestFakeSyncCopyIntoCapturingStreamBlock: the order a synchronous copy takes after its block's
// stream (TestFakeSyncCopyAfterSameStreamReuse) records nothing on a stream a CUDA graph capture
// holds: the copy is made, and the user's capture stays valid.
func TestFakeSyncCopyIntoCapturingStreamBlock(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	s := newStream(t, dev, h)
	const n = 4096
	p, q := alloc(t, h, n, s), alloc(t, h, n, s)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must(t, "StreamBeginCapture", dev.StreamBeginCapture(s, cuda.CaptureGlobal))
	want := pattern(n, 5)
	errs := []error{h.HtoD(pcuda.DevicePtr(p), want),
		h.DtoD(pcuda.DevicePtr(q), pcuda.DevicePtr(p), n)}
	g, err := dev.StreamEndCapture(s)
	if err != nil {
		t.Fatalf("a synchronous copy into a block of the capturing stream invalidated it: %v",
			err)
	}
	must(t, "GraphDestroy", dev.GraphDestroy(g))
	must(t, "HtoD, DtoD during the capture", errors.Join(errs...))
	got := make([]byte, n)
	must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(q)))
	if !bytes.Equal(got, want) {
		t.Errorf("DtoD during the capture: byte %d is wrong", firstDiff(got, want))
	}
	freeAll(t, h, []cuda.DevicePtr{p, q})
}
