package uvm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// TestDistinctKeepsOwnText: distinct (Close's heldBackError) takes apart the errors an
// errors.Join joins, not an error with a text of its own that wraps two (keptError of a
// failed device, with two %w): before, it laid that one out too, and its text ("the driver
// refused to destroy ..., which it keeps ...; a later Close tries again") was lost. An error
// wrapping ErrHeldBack still gives only what it wraps besides (the caller says ErrHeldBack).
func TestDistinctKeepsOwnText(t *testing.T) {
	fault := fmt.Errorf("cuda: CUDA_ERROR_ILLEGAL_ADDRESS: %w", pinmalloc.ErrDeviceFault)
	kept := keptError("uvm: the driver refused to destroy 2 streams of the tier's, which it keeps",
		fault)
	other := errors.New("uvm: closing the tier's host pool: busy")
	held := fmt.Errorf("%w: 1 MiB stay out of use: synchronize: %w", ErrHeldBack, other)
	err := distinct([]error{errors.Join(kept, nil, other), held, ErrHeldBack, kept})
	if want := kept.Error() + "\n" + other.Error(); err == nil || err.Error() != want {
		t.Errorf("distinct: %q; want %q", err, want)
	}
	if !errors.Is(err, ErrDeviceFault) || !errors.Is(err, pinmalloc.ErrDeviceFault) {
		t.Errorf("distinct: %v; want it to match ErrDeviceFault", err)
	}
}
