package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
)

// TestFakeFaultErrorsMatchDeviceFault: once a kernel has faulted (the context's sticky error),
// every call of the heap that the driver fails says so with device.ErrDeviceFault, as
// ForgetStream and a new stream's check did already: an Alloc whose poll of a deferred free
// meets the fault, one out of memory whose reclaim meets it, Sync, Trim, an async copy, a
// FreeAsync whose ZeroOnFree memset the driver refuses, and Close. Before, all of them but the
// new stream's check matched pinmalloc.ErrDeviceFault (the driver's error) alone, which a user
// of package device, testing errors.Is(err, device.ErrDeviceFault), took for another failure.
func TestFakeFaultErrorsMatchDeviceFault(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	defer f.Hold(false)
	// h2 holds a deferred free and nothing else live, for Close.
	h2 := newHeap(t, dev, Options{Capacity: 8 << 20, PurgeDelay: -1})
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	p, q := alloc(t, h, 64<<10, a), alloc(t, h, 64<<10, a)
	p2 := alloc(t, h2, 64<<10, a)
	t.Cleanup(func() { must(t, "ForgetStream of h2", h2.ForgetStream(pcuda.Stream(a))) }) // before a's
	f.Hold(true)
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b))) // waits on b
	must(t, "FreeAsync on b", h2.FreeAsync(pcuda.DevicePtr(p2), pcuda.Stream(b)))
	f.Fault(t, dev)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrDeviceFault) || !errors.Is(err, pinmalloc.ErrDeviceFault) ||
			!errors.Is(err, pcuda.ErrDeviceFault) {
			t.Errorf("%s after a fault: %v; want an error matching device.ErrDeviceFault", what, err)
		}
		if n := strings.Count(err.Error(), ErrDeviceFault.Error()); n > 1 {
			t.Errorf("%s after a fault: %v; says %q %d times", what, err, ErrDeviceFault, n)
		}
		// The fault is one, however many of the calls' waits met it: said once.
		if n := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); n > 1 {
			t.Errorf("%s after a fault: %q says the fault %d times", what, err, n)
		}
		for _, line := range strings.Split(err.Error(), "\n") { // an error of errors.Join a line each
			if n := strings.Count(line, "device: "); n > 1 {
				t.Errorf("%s after a fault: %q says \"device: \" %d times", what, line, n)
			}
		}
	}
	_, err := h.Alloc(64<<10, pcuda.Stream(a))
	check("Alloc with a free deferred", err)
	_, err = h.Alloc(64<<20, pcuda.Stream(a))
	check("Alloc out of memory", err)
	check("Sync", h.Sync())
	check("Trim", h.Trim())
	check("MemsetAsync", h.MemsetAsync(pcuda.DevicePtr(q), 0, 64<<10, pcuda.Stream(a)))
	check("FreeAsync", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(a)))
	check("Close", h2.Close())
	f.ClearStickyError()
	must(t, "Free once the fault is cleared", h.Free(pcuda.DevicePtr(q)))
}
