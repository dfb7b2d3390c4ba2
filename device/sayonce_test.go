package device

import (
	"errors"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
)

// saysDeviceOnce fails the test when a line of err (errors.Join's a line each) says "device: "
// more than once: one of this package's errors wrapped by another says the package once.
func saysDeviceOnce(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		if n := strings.Count(line, "device: "); n > 1 {
			t.Errorf("%s: %q says \"device: \" %d times", what, line, n)
		}
	}
}

// TestFakeParkedCloseBusySaysDeviceOnce: Close of a heap with a parked stream (parkDestroyed)
// while a blocking stream the heap has never seen captures (every stream the heap sees idle,
// the legacy stream held) is refused by the synchronize of the context for the parked stream:
// ErrBusy, matching cuda.ErrCapturing, said with "device: " once, not "device: work in flight:
// device: the synchronize of the context ...".
func TestFakeParkedCloseBusySaysDeviceOnce(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 16 << 20, PurgeDelay: -1})
	if f == nil {
		return
	}
	defer f.Hold(false)
	a := newStream(t, dev, h)
	c, err := dev.StreamCreate(false) // blocking, never given to the heap
	must(t, "StreamCreate", err)
	t.Cleanup(func() { must(t, "StreamDestroy", dev.StreamDestroy(c)) })
	_, _, endCapture := parkDestroyed(t, f, dev, h, a, c, 64<<10, false)
	err = h.Close()
	if !errors.Is(err, ErrBusy) || !errors.Is(err, pcuda.ErrCapturing) {
		t.Fatalf("Close during the capture: %v; want ErrBusy and cuda.ErrCapturing", err)
	}
	saysDeviceOnce(t, "Close during the capture", err)
	endCapture()
	must(t, "Close", h.Close())
}
