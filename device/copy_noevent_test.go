package device

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeWriteNoEventSaysTheRefusal: a synchronous copy into a block of a stream's heap, and
// the clear of a Free (Options.ZeroOnFree), are ordered after the work queued on that stream by
// an event recorded there. When the driver cannot make it (cuEventCreate refused), nothing is
// written or freed, and the error says so as a stream's check does: out of memory is
// ErrOutOfMemory, another refusal pinmalloc.ErrRefused, with "no event". The block stays the
// caller's: the calls again, with the driver making the event, succeed. Before, the driver's
// error came bare ("device: HtoD copy of 4096 bytes: cuda: CUDA_ERROR_INVALID_VALUE: fake driver
// error"), which matched pinmalloc.ErrInvalidValue alone, as if the caller's arguments were bad.
func TestFakeWriteNoEventSaysTheRefusal(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 8 << 20, PurgeDelay: -1, ZeroOnFree: true})
	if f == nil {
		return
	}
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	p, q := alloc(t, h, 4096, a), alloc(t, h, 4096, a)
	f.Hold(true)
	defer f.Complete()
	// A poll's point on busy b takes the heap's one idle event (its checks'): the next write
	// needs a new one.
	must(t, "MemsetAsync on b", h.MemsetAsync(pcuda.DevicePtr(q), 1, 4096, pcuda.Stream(b)))
	must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(q), pcuda.Stream(b)))
	r := alloc(t, h, 4096, a)
	for _, c := range fakecuda.EventRefusals(ErrOutOfMemory, pinmalloc.ErrRefused) {
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, c.Want) || err == nil || !strings.Contains(err.Error(), "no event") {
				t.Errorf("%s with cuEventCreate refused (%d) = %v; want %v saying \"no event\"", what, c.Code, err, c.Want)
			}
		}
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		check("HtoD", h.HtoD(pcuda.DevicePtr(p), make([]byte, 4096)))
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		check("Free", h.Free(pcuda.DevicePtr(p)))
		if st := h.Stats(); st.Live != 3 {
			t.Errorf("after the refused Free: %d live, want 3", st.Live)
		}
	}
	must(t, "HtoD again", h.HtoD(pcuda.DevicePtr(p), make([]byte, 4096)))
	f.Hold(false)
	freeAll(t, h, []uintptr{p, r})
}
