package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestCloseKeepsMoverItCouldNotClose: when the driver refuses to free the pinned staging buffer
// of the tier's own mover (a copyengine.Batcher, which keeps such a buffer for its next Close),
// the tier's Close says so and keeps the mover, Stats.Released false, so that a later Close
// tries again and frees the buffer. Before, Close dropped the mover whatever its Close
// returned: the second Close returned ErrClosed and the buffer stayed until the process ended.
func TestCloseKeepsMoverItCouldNotClose(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 << 10
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	s := stream(t, dev)
	h, err := tr.Alloc(n)
	must(t, err)
	_, err = tr.Acquire(h, s, uvm.Write)
	must(t, err)
	must(t, tr.Release(h, s))
	must(t, tr.Evict([]uvm.Handle{h})) // a copy by the mover: its staging buffer
	must(t, tr.Free(h))
	hostAllocs := func() int64 { return f.LiveObjects()["host allocs"] }
	if hostAllocs() == 0 {
		t.Skipf("the mover (%s) holds no staging buffer to refuse: %v", tr.Stats().Mover, f.LiveObjects())
	}
	f.FailAfter(fakecuda.CallFreeHost, 0, fakecuda.ResultInvalidValue)
	err = tr.Close()
	if err == nil || !strings.Contains(err.Error(), "a later Close tries again") {
		t.Fatalf("Close whose mover's staging buffer the driver refused to free: %v; "+
			"want an error saying a later Close tries again", err)
	}
	if tr.Stats().Released {
		t.Error("Stats.Released after a Close that kept the mover's staging buffer")
	}
	if hostAllocs() == 0 {
		t.Fatalf("the refused Close freed the staging buffer: %v", f.LiveObjects())
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v; want nil: it closes the mover the first could not", err)
	}
	if !tr.Stats().Released {
		t.Error("Stats.Released false after the second Close freed the mover's staging buffer")
	}
	if v := hostAllocs(); v != 0 {
		t.Errorf("after the second Close: %d host allocations still live (%v)", v, f.LiveObjects())
	}
	if err := tr.Close(); !errors.Is(err, uvm.ErrClosed) {
		t.Errorf("third Close: %v, want ErrClosed", err)
	}
}
