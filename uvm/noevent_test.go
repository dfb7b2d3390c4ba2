package uvm_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// TestFakeNoEventNotTheStreams: an Acquire on a stream new to the tier, whose check needs an
// event the driver cannot make (cuEventCreate refused), is not refused as an invalid stream:
// the stream was never asked. Out of memory is pinmalloc.ErrOutOfMemory, another refusal
// pinmalloc.ErrRefused; the block is not acquired, and the same Acquire again succeeds.
// Before, both were ErrInvalidStream ("stream 0x..., refused as a stream of CUDA device 0").
func TestFakeNoEventNotTheStreams(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(pinmalloc.ErrOutOfMemory, pinmalloc.ErrRefused) {
		tr := newTier(t, dev, uvm.Options{DeviceBudget: 256 << 10})
		hs := filled(t, tr, 1, 64<<10)
		s := stream(t, dev)
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		_, err := tr.Acquire(hs[0], s, uvm.Read)
		if !errors.Is(err, c.Want) || errors.Is(err, uvm.ErrInvalidStream) ||
			strings.Contains(err.Error(), "refused as a stream") {
			t.Errorf("Acquire with cuEventCreate refused (%d) = %v; want %v, not a refused stream",
				c.Code, err, c.Want)
		}
		_, err = tr.Acquire(hs[0], s, uvm.Read)
		must(t, err)
		must(t, tr.Release(hs[0], s))
		must(t, tr.Sync())
		must(t, tr.ForgetStream(s))
		must(t, tr.Close())
	}
}
