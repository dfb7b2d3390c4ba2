package cuda_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestFakeCloseRetriesRefusedRelease: a Close whose cuDevicePrimaryCtxRelease the driver
// refuses returns the refusal, says a later Close tries again, and keeps the retain counted;
// the Device stays closed to calls, and the next Close gives the retain back. Close counted the
// retain given back and marked the Device closed before the release: the refusal leaked the
// retain for good, and every later Close returned nil, releasing nothing.
func TestFakeCloseRetriesRefusedRelease(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d, err := cuda.Open(0)
	need(t, "Open", err)
	retains := cuda.PrimaryRetains()
	const invalidContext = 201 // CUDA_ERROR_INVALID_CONTEXT, one of the release's refusals
	f.FailAfter(fakecuda.CallPrimaryRelease, 0, invalidContext)
	err = d.Close()
	var r cuda.Result
	switch {
	case err == nil:
		t.Fatal("Close whose release the driver refused returned nil")
	case !errors.As(err, &r) || r != invalidContext:
		t.Errorf("Close whose release the driver refused = %v, want it to wrap result %d", err,
			invalidContext)
	case !strings.Contains(err.Error(), "a later Close tries again"):
		t.Errorf("Close whose release the driver refused = %q, want it to say a later Close tries again",
			err)
	}
	if n, held := cuda.PrimaryRetains(), f.Retains(0); n != retains || held != 1 {
		t.Errorf("after the refused release: %d retains counted (want %d), the driver holds %d (want 1)",
			n, retains, held)
	}
	if _, err := d.MemAlloc(4096); !errors.Is(err, pinmalloc.ErrClosed) {
		t.Errorf("MemAlloc after a Close whose release was refused = %v, want ErrClosed", err)
	}
	need(t, "Close again", d.Close())
	if n, held := cuda.PrimaryRetains(), f.Retains(0); n != retains-1 || held != 0 {
		t.Errorf("after Close again: %d retains counted (want %d), the driver holds %d (want 0)",
			n, retains-1, held)
	}
	need(t, "Close a third time", d.Close())
}
