package pinned_test

import (
	"errors"
	"strings"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeWaitStreamsNoEventNotTheStream: WaitStreams of a buffer recorded on the legacy
// default stream waits for a point it records there (streamq's WaitPoint: the legacy stream's
// work comes after every blocking stream's). When the driver cannot make the event for it
// (cuEventCreate refused: the pool's first point makes its first event), the stream is not at
// fault and was not waited for: out of memory is ErrOutOfMemory, another refusal ErrRefused, not
// ErrInvalidStream, and the error says that no event could be made. The same WaitStreams again,
// with the driver making the event, waits. Before, the refusal was "pinned: invalid stream:
// cuda: CUDA_ERROR_INVALID_VALUE: fake driver error", and out of memory said nothing of an event.
func TestFakeWaitStreamsNoEventNotTheStream(t *testing.T) {
	f, _ := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(pinned.ErrOutOfMemory, pinned.ErrRefused) {
		p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 8 << 20, PurgeDelay: -1})
		b, err := p.Alloc(4096)
		ok(t, "Alloc", err)
		ok(t, "RecordStream on the legacy stream", p.RecordStream(b, pubcuda.Stream(0))) // asks nothing
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		err = p.WaitStreams(b)
		if !errors.Is(err, c.Want) || errors.Is(err, pinned.ErrInvalidStream) ||
			!strings.Contains(err.Error(), "no event") {
			t.Errorf("WaitStreams with cuEventCreate refused (%d) = %v; want %v saying \"no event\", not an invalid stream",
				c.Code, err, c.Want)
		}
		ok(t, "WaitStreams again", p.WaitStreams(b))
		ok(t, "Free", p.Free(b))
		closePool(t, f, p)
	}
}
