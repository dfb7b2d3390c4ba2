package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeNoEventNotTheStreams: a FreeAsync on a stream new to the heap, whose check needs an
// event the driver cannot make (cuEventCreate refused: the heap's first check makes its first
// event), is not refused as an invalid stream: the stream was never asked. Out of memory
// (CUDA_ERROR_OUT_OF_MEMORY) is ErrOutOfMemory, another refusal pinmalloc.ErrRefused; nothing
// is freed or deferred, the block stays the caller's, and the same FreeAsync again, with the
// driver making the event, frees it. Before, both were ErrInvalidStream: "device: invalid
// stream: stream 0x..., refused as a stream of CUDA device 0: cuda: CUDA_ERROR_OUT_OF_MEMORY".
func TestFakeNoEventNotTheStreams(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(ErrOutOfMemory, pinmalloc.ErrRefused) {
		h := newHeap(t, dev, Options{Capacity: 16 << 20, PurgeDelay: -1})
		p := alloc(t, h, 4096, 0) // the legacy stream is not asked: no event yet
		s := newStream(t, dev, h)
		events := f.Stat(fakecuda.Events)
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		err := h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s))
		if !errors.Is(err, c.Want) || errors.Is(err, ErrInvalidStream) ||
			strings.Contains(err.Error(), "refused as a stream") {
			t.Errorf("FreeAsync with cuEventCreate refused (%d) = %v; want %v, not a refused stream",
				c.Code, err, c.Want)
		}
		if n := f.Stat(fakecuda.Events); n != events {
			t.Errorf("%d events after the refused create, want %d", n, events)
		}
		if st := h.Stats(); st.Live != 1 || st.Deferred != 0 {
			t.Errorf("after the refused FreeAsync: %d live, %d deferred; want 1 (the block), 0",
				st.Live, st.Deferred)
		}
		must(t, "FreeAsync again", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(s)))
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	}
}
