package device

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/heap"
)

// TestFaultedSaysTheFaultOnceAndKeepsTheRest: an error of several failures, the device fault
// met by two waits (one of them inside a join of a join) among them, says the fault once, with
// the first wait that met it, and keeps every other failure, which still matches its sentinel
// under errors.Is; an error wrapping several with a text of its own is not taken apart.
func TestFaultedSaysTheFaultOnceAndKeepsTheRest(t *testing.T) {
	first := fmt.Errorf("device: wait for deferred frees: %w", pcuda.ErrDeviceFault)
	again := fmt.Errorf("device: deferred frees: %w", pcuda.ErrDeviceFault)
	other := fmt.Errorf("device: free: %w", heap.ErrDoubleFree)
	both := fmt.Errorf("device: %w and %w", pcuda.ErrDeviceFault, heap.ErrNotOwned)
	err := faulted(errors.Join(first, errors.Join(errors.Join(again, other), both)))
	for _, want := range []error{ErrDeviceFault, pinmalloc.ErrDeviceFault, pcuda.ErrDeviceFault,
		heap.ErrDoubleFree} {
		if !errors.Is(err, want) {
			t.Errorf("faulted: %q does not match %v", err, want)
		}
	}
	if errors.Is(err, heap.ErrNotOwned) {
		t.Errorf("faulted: %q kept a second error saying the fault", err)
	}
	if want := first.Error() + "\n" + other.Error(); err.Error() != want {
		t.Errorf("faulted: %q; want %q", err, want)
	}
	got := faulted(both)
	if !errors.Is(got, heap.ErrNotOwned) || strings.Count(got.Error(), "device: ") != 1 {
		t.Errorf("faulted(%q) = %q; want its text and its errors kept", both, got)
	}
	if faulted(nil) != nil {
		t.Error("faulted(nil) is not nil")
	}
}
