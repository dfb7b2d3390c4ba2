package cuda

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// TestResultSaidOnce: errkind.Once tells the driver's results apart by their code (DriverResult),
// so that two calls the driver refused alike, each said in its own words, say the refusal once,
// and two refused differently keep both.
func TestResultSaidOnce(t *testing.T) {
	a := fmt.Errorf("cuda: destroy stream 0x1: %w", resultInvalidHandle)
	b := fmt.Errorf("cuda: destroy event 0x2: %w", resultInvalidHandle)
	if err := errkind.Once(a, b); err != a {
		t.Errorf("Once(%q, %q) = %q; want the first alone", a, b, err)
	}
	c := fmt.Errorf("cuda: destroy event 0x2: %w", resultInvalidValue)
	if err := errkind.Once(a, c); !errors.Is(err, resultInvalidHandle) ||
		!errors.Is(err, resultInvalidValue) {
		t.Errorf("Once(%q, %q) = %q; want both", a, c, err)
	}
}
