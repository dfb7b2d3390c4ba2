package copyengine

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestNewOnClosedDevice: New on a closed device fails with an error matching
// pinmalloc.ErrClosed, whatever the method. Before, MethodAuto took the kernel's and the batch
// API's refusals for a driver without them and returned a Batcher of the per-copy method, whose
// every Copy then failed.
func TestNewOnClosedDevice(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	must(t, "Close the device", dev.Close())
	for _, m := range []Method{MethodAuto, MethodKernel, MethodBatchAPI, MethodPerCopy} {
		if b, err := New(public(dev), Options{Method: m}); b != nil || !errors.Is(err, pinmalloc.ErrClosed) {
			t.Errorf("New(%s) on a closed device: %v, %v; want nil and pinmalloc.ErrClosed", m, b, err)
		}
	}
}
