package device

import (
	"errors"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeHoldReleaseClosedSaysDeviceOnce: a Release after the heap's Close is refused with
// ErrClosed, and its text names the package once ("device: heap closed: release of ..."), not
// once for the Release and again for the sentinel.
func TestFakeHoldReleaseClosedSaysDeviceOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	h := newHeap(t, dev, Options{Capacity: 16 << 20})
	p := alloc(t, h, 4096, 0)
	hd, err := h.Hold(pcuda.DevicePtr(p))
	must(t, "Hold", err)
	must(t, "Release", hd.Release())
	must(t, "Free", h.Free(pcuda.DevicePtr(p)))
	must(t, "Close", h.Close())
	err = hd.Release()
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Release after Close = %v, want ErrClosed", err)
	}
	if n := strings.Count(err.Error(), "device:"); n != 1 {
		t.Errorf("Release after Close = %q: says \"device:\" %d times, want once", err, n)
	}
}
