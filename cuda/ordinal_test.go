package cuda_test

import (
	"errors"
	"math"
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeOpenOrdinalBeyondInt: an ordinal no driver can have, beyond the C int the driver
// takes, fails with ErrNoDevice, as a negative one does. Before, it was truncated to 32 bits:
// Open(1<<32) opened device 0 and called it device 4294967296.
func TestFakeOpenOrdinalBeyondInt(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	for _, ordinal := range []int{-1, 1 << 32, 1<<32 + 1, math.MaxInt, math.MinInt, -1 << 32} {
		d, err := cuda.Open(ordinal)
		if d != nil {
			t.Errorf("Open(%d) opened %v", ordinal, d)
			must(t, "Close", d.Close())
			continue
		}
		if !errors.Is(err, cuda.ErrNoDevice) {
			t.Errorf("Open(%d) = %v; want ErrNoDevice", ordinal, err)
		}
	}
}
