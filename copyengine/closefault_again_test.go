package copyengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCloseAgainAfterFaultSaysItOnce: a second Close while the context's sticky error still
// refuses every call says the fault once, as the first does, with what it keeps.
func TestCloseAgainAfterFaultSaysItOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	host, d := hostMem(t, dev, n), devMem(t, dev, n)
	b, err := New(public(dev), Options{Method: MethodKernel})
	must(t, "New", err)
	must(t, "Copy", b.Copy([]Job{mkJob(d, host, n)}, 0))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0))
	f.Fault(t, dev)
	for _, what := range []string{"Close after a fault", "Close again"} {
		err := b.Close()
		if !errors.Is(err, pinmalloc.ErrDeviceFault) || !errors.Is(err, ErrDeviceFault) {
			t.Errorf("%s: %v, want ErrDeviceFault", what, err)
		}
		if err != nil {
			if k := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); k != 1 {
				t.Errorf("%s says the fault %d times: %q", what, k, err)
			}
		}
	}
	f.ClearStickyError()
	must(t, "Close once the driver works again", b.Close())
}
