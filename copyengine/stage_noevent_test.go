package copyengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestFakeStageNoEventSaysTheRefusal: the kernel's first Copy allocates a staging buffer with
// an event to record after the launch that reads it. When the driver cannot make that event
// (cuEventCreate refused), the Copy copies nothing, frees the buffer, and says so as a stream's
// check does: streamq.ErrNoEvent, pinmalloc.ErrOutOfMemory where memory ran out, else
// pinmalloc.ErrRefused, "no event" said once. The Copy again, with the driver making the event,
// copies. Before, the driver's error came bare ("copyengine: staging buffer: cuda:
// CUDA_ERROR_INVALID_VALUE: fake driver error"), matching pinmalloc.ErrInvalidValue alone, as
// if the caller's jobs were bad.
func TestFakeStageNoEventSaysTheRefusal(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(s)) }()
	host, d := hostMem(t, dev, 4096), devMem(t, dev, 4096)
	for _, c := range fakecuda.EventRefusals(pinmalloc.ErrOutOfMemory, pinmalloc.ErrRefused) {
		b := newBatcher(t, dev, Options{Method: MethodKernel})
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		err := b.Copy([]Job{mkJob(d, host, 4096)}, pcuda.Stream(s))
		if !errors.Is(err, streamq.ErrNoEvent) || !errors.Is(err, c.Want) ||
			strings.Count(err.Error(), "no event") != 1 {
			t.Errorf("Copy with cuEventCreate refused (%d) = %v; want streamq.ErrNoEvent and %v, \"no event\" said once", c.Code, err, c.Want)
		}
		must(t, "Copy again", b.Copy([]Job{mkJob(d, host, 4096)}, pcuda.Stream(s)))
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	}
}
