package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestCloseKeepsPoolItCouldNotClose: when the tier's own host pool fails to close (as one
// whose deferred buffers' streams have not passed them within its wait: ErrBusy), Close says
// so and keeps the pool, so that a later Close tries again and gives its memory back. Before,
// Close dropped the pool whatever its Close returned: the second Close returned ErrClosed and
// the pool's memory stayed allocated until the process ended.
func TestCloseKeepsPoolItCouldNotClose(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 64 << 10
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20, HostCapacity: 8 << 20})
	h, err := tr.Alloc(n)
	must(t, err)
	b, err := tr.AcquireHost(h, uvm.Write) // the pool commits host memory
	must(t, err)
	copy(b, pattern(1, n))
	must(t, tr.ReleaseHost(h))
	must(t, tr.Free(h))
	hostBytes := func() int64 { return f.LiveObjects()["host VMM bytes"] + f.LiveObjects()["registered bytes"] }
	if hostBytes() == 0 {
		t.Fatalf("no host memory held before Close: %v", f.LiveObjects())
	}
	uvm.FailPoolClose(pinned.ErrBusy)
	err = tr.Close()
	if !errors.Is(err, pinned.ErrBusy) || !strings.Contains(err.Error(), "a later Close tries again") {
		t.Fatalf("Close whose host pool fails to close: %v; want pinned.ErrBusy, saying a later Close tries again", err)
	}
	if tr.Stats().Released {
		t.Error("Stats.Released after a Close that kept the host pool")
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v; want nil: it closes the host pool the first could not", err)
	}
	if !tr.Stats().Released {
		t.Error("Stats.Released false after the second Close gave the host pool back")
	}
	if v := hostBytes(); v != 0 {
		t.Errorf("after the second Close: %d bytes of host memory still allocated (%v)", v, f.LiveObjects())
	}
	if err := tr.Close(); !errors.Is(err, uvm.ErrClosed) {
		t.Errorf("third Close: %v, want ErrClosed", err)
	}
}
