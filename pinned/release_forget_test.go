package pinned

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeReleaseRacingForgetStream: a ForgetStream of stream s while the last Release of a
// buffer freed on s with FreeAsync (while held) looks whether s was forgotten. The Release
// frees the buffer at once (s has passed the work queued before the FreeAsync), makes no list
// for s, and s stays forgotten: a live buffer recorded on s before is freed at once too. The
// Release looked, found s known, and then made a list for it after the ForgetStream: the
// buffer waited on the forgotten handle (which the reclaims query, and which may be destroyed
// or another stream's by then), and s no longer counted as forgotten, so the free of the
// other buffer waited for it too.
func TestFakeReleaseRacingForgetStream(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	p, err := New(Options{Backend: CUDAHost, Capacity: 16 << 20, PurgeDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := dev.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.StreamDestroy(hs)
	s := cuda.Stream(hs)
	b, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.RecordStream(c, s); err != nil {
		t.Fatal(err)
	}
	h, err := p.Hold(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.FreeAsync(b, s); err != nil { // deferred to the Release
		t.Fatal(err)
	}
	forgot := false
	defer func() { releaseForgetLook = nil }()
	releaseForgetLook = func() {
		releaseForgetLook = nil
		forgot = true
		if err := p.ForgetStream(s); err != nil {
			t.Error(err)
		}
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if !forgot {
		t.Fatal("the Release did not look at its FreeAsync's stream")
	}
	p.flushAll() // a buffer deferred goes to a FreeAsync cache first: on its list, it counts
	if n, _ := p.deferred(); n != 0 || p.order.lists.Streams() != 0 {
		t.Errorf("after the Release, its FreeAsync's stream forgotten: %d buffers deferred, lists for %d streams; want 0, 0", n, p.order.lists.Streams())
	}
	if err := p.Free(c); err != nil {
		t.Fatal(err)
	}
	p.flushAll()
	if n, _ := p.deferred(); n != 0 {
		t.Errorf("Free of a buffer recorded only on a forgotten stream: %d buffers deferred, want 0", n)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}
