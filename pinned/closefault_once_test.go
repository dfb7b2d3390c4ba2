package pinned_test

import (
	"errors"
	"strings"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeCloseAfterFaultSaysItOnce: a Close after a device fault, of a pool whose streams had
// passed every free, finds the driver refusing both the release of the pool's memory and the
// destroy of its event, with the one sticky error: it says the fault once, keeps both, and the
// Close after the error is cleared gives both back.
func TestFakeCloseAfterFaultSaysItOnce(t *testing.T) {
	f, dev, p, s := faultRig(t)
	if f == nil {
		return
	}
	b, err := p.Alloc(4096)
	ok(t, "Alloc", err)
	ok(t, "FreeAsync", p.FreeAsync(b, pubcuda.Stream(s)))
	ok(t, "StreamSynchronize", dev.StreamSynchronize(s))
	ok(t, "Trim", p.Trim())
	f.Fault(t, dev)
	err = p.Close()
	if !errors.Is(err, pinned.ErrDeviceFault) {
		t.Errorf("Close after a fault: %v; want ErrDeviceFault", err)
	}
	if err != nil {
		if n := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
			t.Errorf("Close after a fault says the fault %d times: %q", n, err)
		}
	}
	held := f.LiveObjects()
	if held["events"] == 0 || held["reservations"] == 0 {
		t.Errorf("after the refused Close the fake holds %v; want the pool's event and memory kept", held)
	}
	f.ClearStickyError()
	if err := p.Close(); err != nil && !errors.Is(err, pinned.ErrClosed) || errors.Is(err, pinned.ErrDeviceFault) {
		t.Errorf("Close once the driver works again: %v", err)
	}
	if live := f.LiveObjects(); live["events"] != 0 || live["reservations"] != 0 || live["handles"] != 0 {
		t.Errorf("after the second Close the fake holds %v", live)
	}
}
