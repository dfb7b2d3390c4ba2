//go:build cgo && linux

package fakecuda

import (
	"fmt"
	"testing"
)

// TestEventInterprocessNeedsDisableTiming: cuEventCreate with CU_EVENT_INTERPROCESS but without
// CU_EVENT_DISABLE_TIMING is CUDA_ERROR_INVALID_VALUE (D: cuEventCreate, "CU_EVENT_INTERPROCESS
// must be specified along with CU_EVENT_DISABLE_TIMING"); with it, and every combination of the
// other flags, the event is made. Before, the fake made an interprocess event with timing.
func TestEventInterprocessNeedsDisableTiming(t *testing.T) {
	onFakePrimary(t, 1, func(t *testing.T, p *primaryDriver, f *Driver) {
		const blockingSync, disableTiming, interprocess = 0x1, 0x2, 0x4
		retainPush(t, p, 0)
		defer popRelease(t, p, 0)
		for _, flags := range []uint32{interprocess, interprocess | blockingSync} {
			_, err := p.EventCreateFlags(flags)
			answer(t, fmt.Sprintf("cuEventCreate(%#x), INTERPROCESS without DISABLE_TIMING", flags), err, codeInvalidValue)
		}
		for _, flags := range []uint32{0, blockingSync, disableTiming, blockingSync | disableTiming,
			interprocess | disableTiming, interprocess | disableTiming | blockingSync} {
			e, err := p.EventCreateFlags(flags)
			must(t, fmt.Sprintf("cuEventCreate(%#x)", flags), err)
			must(t, "cuEventDestroy", p.EventDestroy(e))
		}
	})
}
