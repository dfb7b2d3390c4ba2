package uvm_test

import (
	"errors"
	"math"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestFakeSizeOfZeroIsInvalidSize: a size of zero or less, to Alloc or MakeRoom, matches the
// module's kind for it, pinmalloc.ErrInvalidSize, as pinned's, device's and heap's do (besides
// uvm.ErrInvalidOptions, as documented). It matched ErrInvalidOptions alone, kind
// pinmalloc.ErrInvalid: code that tests the kind once for several packages missed the tier's.
// Nothing changes: the next Alloc and Free work, and the tier holds no block.
func TestFakeSizeOfZeroIsInvalidSize(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	tr := newTier(t, dev, uvm.Options{DeviceBudget: 1 << 20})
	for _, n := range []int{0, -1, math.MinInt} {
		_, aerr := tr.Alloc(n)
		merr := tr.MakeRoom(n)
		for what, err := range map[string]error{"Alloc": aerr, "MakeRoom": merr} {
			if !errors.Is(err, pinmalloc.ErrInvalidSize) || !errors.Is(err, uvm.ErrInvalidOptions) {
				t.Errorf("%s(%d): %v; want pinmalloc.ErrInvalidSize and uvm.ErrInvalidOptions", what, n, err)
			}
		}
	}
	h, err := tr.Alloc(4 * kib)
	must(t, err)
	must(t, tr.Free(h))
	if st := tr.Stats(); st.Blocks != 0 || st.LiveBytes != 0 {
		t.Errorf("after the refusals and a pair: %d blocks, %d bytes live", st.Blocks, st.LiveBytes)
	}
}
