package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeTrimNoEventSaysTheRefusal: a Trim while the legacy default stream's heap holds memory
// waits for a point it records in the legacy stream (streamq's WaitLegacyOrder) before any heap
// gives memory back. When the driver cannot make the event for it (cuEventCreate refused: the
// heap's first point makes its first event), nothing is waited for or given back, and the error
// says so as a stream's check does: out of memory is ErrOutOfMemory, another refusal
// pinmalloc.ErrRefused, with "no event". The Trim again, with the driver making the event,
// gives the memory back. Before, a refusal other than out of memory matched neither
// ("device: wait for a point in the legacy stream: cuda: CUDA_ERROR_INVALID_VALUE: fake driver
// error").
func TestFakeTrimNoEventSaysTheRefusal(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(ErrOutOfMemory, pinmalloc.ErrRefused) {
		h := newHeap(t, dev, Options{Capacity: 8 << 20, PurgeDelay: -1})
		p := alloc(t, h, 64<<10, 0) // the legacy stream is not asked: no event yet
		must(t, "Free", h.Free(pcuda.DevicePtr(p)))
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		err := h.Trim()
		if !errors.Is(err, c.Want) || !strings.Contains(err.Error(), "no event") {
			t.Errorf("Trim with cuEventCreate refused (%d) = %v; want %v saying \"no event\"", c.Code, err, c.Want)
		}
		if st := h.Stats(); st.Arena.ChunksInUse == 0 {
			t.Errorf("Trim with cuEventCreate refused (%d) gave the legacy stream's memory back unwaited", c.Code)
		}
		must(t, "Trim again", h.Trim())
		if st := h.Stats(); st.Arena.ChunksInUse != 0 {
			t.Errorf("Trim again left %d chunks in use", st.Arena.ChunksInUse)
		}
	}
}
