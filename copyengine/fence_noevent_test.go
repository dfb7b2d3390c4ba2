package copyengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestFakeFenceNoEventSaysTheRefusal: a batch copied on the Batcher's side stream (the kernel's
// low-priority stream; the batch API's stream for a legacy-stream batch) is fenced after the
// caller's stream by an event. When the driver cannot make it (cuEventCreate refused), nothing is
// queued, and the Copy says so as a stream's check does: streamq.ErrNoEvent,
// pinmalloc.ErrOutOfMemory where memory ran out, else pinmalloc.ErrRefused, "no event" said once,
// under the package's name. The Copy again, with the driver making the event, copies. Before,
// the driver's error came bare ("cuda: CUDA_ERROR_INVALID_VALUE: fake driver error"), matching
// pinmalloc.ErrInvalidValue alone, as if the caller's jobs were bad.
func TestFakeFenceNoEventSaysTheRefusal(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(s)) }()
	host, d := hostMem(t, dev, 4096), devMem(t, dev, 4096)
	for _, m := range []struct {
		name string
		o    Options
		on   cuda.Stream
		skip int // the events made before the fence's: the kernel's staging buffer's
	}{
		{"kernel, low priority", Options{Method: MethodKernel, LowPriority: true}, s, 1},
		{"batch API, legacy stream", Options{Method: MethodBatchAPI}, 0, 0},
	} {
		for _, c := range fakecuda.EventRefusals(pinmalloc.ErrOutOfMemory, pinmalloc.ErrRefused) {
			b := newBatcher(t, dev, m.o)
			f.FailAfter(fakecuda.CallEventCreate, m.skip, c.Code)
			err := b.Copy([]Job{mkJob(d, host, 4096)}, pcuda.Stream(m.on))
			if !errors.Is(err, streamq.ErrNoEvent) || !errors.Is(err, c.Want) ||
				strings.Count(err.Error(), "no event") != 1 || !strings.HasPrefix(err.Error(), "copyengine: ") {
				t.Errorf("%s: Copy with cuEventCreate refused (%d) = %v; want streamq.ErrNoEvent and %v, \"no event\" said once, under the package's name",
					m.name, c.Code, err, c.Want)
			}
			must(t, "Copy again", b.Copy([]Job{mkJob(d, host, 4096)}, pcuda.Stream(m.on)))
			must(t, "StreamSynchronize", dev.StreamSynchronize(m.on))
		}
	}
}
