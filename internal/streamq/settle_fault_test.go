package streamq_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestSettleSaysFaultOnce: Settle after the device faulted (the context's sticky error, which
// every call then meets) says the fault once, matching pinmalloc.ErrDeviceFault, and keeps
// every item; once the error is cleared, a Settle hands them all back. Before, it joined the
// failed query of the legacy stream to its Reclaim's failed synchronize, and said the fault
// twice (a device heap's Close said it so).
func TestSettleSaysFaultOnce(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	ls := faultedItems(t, f, dev)
	done, s, running, err := ls.Settle(nil, nil)
	if len(done) != 0 || running || !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Fatalf("Settle after the fault: %v back, stream %#x running %v, error %v; want nothing, "+
			"not running, the fault", done, s, running, err)
	}
	if n := strings.Count(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS"); n != 1 {
		t.Errorf("Settle after the fault says it %d times, want once: %v", n, err)
	}
	if w := ls.Weight(); w != 3 {
		t.Errorf("the lists weigh %d after the failed Settle, want 3: items were lost", w)
	}
	f.ClearStickyError()
	done, _, running, err = ls.Settle(nil, nil)
	slices.Sort(done)
	if err != nil || running || !slices.Equal(done, []int{0, 1, 2}) {
		t.Fatalf("Settle once the error is cleared: %v back, running %v, error %v; want [0 1 2]",
			done, running, err)
	}
}
