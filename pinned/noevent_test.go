package pinned_test

import (
	"errors"
	"strings"
	"testing"

	pubcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// TestFakeNoEventNotTheStreams: a FreeAsync or RecordStream on a stream new to the pool, whose
// check needs an event the driver cannot make (cuEventCreate refused: the pool's first check
// makes its first event), is not refused as an invalid stream: the stream was never asked. Out
// of memory (CUDA_ERROR_OUT_OF_MEMORY) is ErrOutOfMemory, another refusal ErrRefused; nothing
// is queued, the buffer stays the caller's, and the same call again, with the driver making
// the event, succeeds. Before, the error said "stream 0x..., refused as a stream of CUDA device
// 0", with ErrInvalidStream for a refusal other than out of memory.
func TestFakeNoEventNotTheStreams(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(pinned.ErrOutOfMemory, pinned.ErrRefused) {
		for _, what := range []string{"RecordStream", "FreeAsync"} {
			p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 8 << 20, PurgeDelay: -1})
			cs, err := dev.StreamCreate(true)
			ok(t, "StreamCreate", err)
			s := pubcuda.Stream(cs)
			b, err := p.Alloc(4096)
			ok(t, "Alloc", err)
			call := func() error {
				if what == "RecordStream" {
					return p.RecordStream(b, s)
				}
				return p.FreeAsync(b, s)
			}
			events := f.Stat(fakecuda.Events)
			f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
			err = call()
			if !errors.Is(err, c.Want) || errors.Is(err, pinned.ErrInvalidStream) ||
				strings.Contains(err.Error(), "refused as a stream") {
				t.Errorf("%s with cuEventCreate refused (%d) = %v; want %v, not a refused stream",
					what, c.Code, err, c.Want)
			}
			if n := f.Stat(fakecuda.Events); n != events {
				t.Errorf("%s: %d events after the refused create, want %d", what, n, events)
			}
			if st := p.Stats(); st.Live != 1 || st.Deferred != 0 {
				t.Errorf("after the refused %s: %d live, %d deferred; want 1 (the buffer), 0",
					what, st.Live, st.Deferred)
			}
			ok(t, what+" again", call())
			if what == "RecordStream" {
				ok(t, "Free", p.Free(b))
			}
			ok(t, "StreamSynchronize", dev.StreamSynchronize(cs))
			ok(t, "ForgetStream", p.ForgetStream(s))
			ok(t, "StreamDestroy", dev.StreamDestroy(cs))
			closePool(t, f, p)
		}
	}
}
