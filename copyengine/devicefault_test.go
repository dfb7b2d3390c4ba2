package copyengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestDeviceFaultSentinel: after the device faulted (a kernel of the Batcher's own read memory
// the device cannot reach), Copy and Close fail with errors matching this package's
// ErrDeviceFault, as device's, pinned's and uvm's do with theirs, and the module's kind; the
// text still names the package once, at its start.
func TestDeviceFaultSentinel(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	host, d := hostMem(t, dev, n), devMem(t, dev, n)
	unmapped := pageableMem(t, n) // no kernel reaches it
	b, err := New(public(dev), Options{Method: MethodKernel})
	must(t, "New", err)
	must(t, "Copy of a job that faults", b.Copy([]Job{mkJob(d, unmapped, 64)}, 0))
	t.Cleanup(f.ClearStickyError)
	if err := dev.StreamSynchronize(0); !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Fatalf("the faulting kernel: %v, want a device fault", err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrDeviceFault) || !errors.Is(err, pinmalloc.ErrDeviceFault) {
			t.Errorf("%s after a fault: %v, want ErrDeviceFault", what, err)
		} else if s := err.Error(); !strings.HasPrefix(s, "copyengine: ") ||
			strings.HasPrefix(s, "copyengine: the device faulted: copyengine: ") {
			t.Errorf("%s after a fault: %q, want \"copyengine: \" once at its start", what, s)
		}
	}
	check("Copy", b.Copy([]Job{mkJob(d, host, n)}, 0))
	check("Close", b.Close())
	f.ClearStickyError()
	must(t, "Close once the driver works again", b.Close())
}
