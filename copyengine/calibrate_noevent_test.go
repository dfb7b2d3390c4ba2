package copyengine

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/streamq"
)

// TestCalibrationNoEventSaysTheRefusal: the calibration times the methods with two events of its
// own. When the driver cannot make one (cuEventCreate refused), the Batcher does not calibrate
// (ErrNotCalibrated), and the reason says so as a stream's check does: streamq.ErrNoEvent,
// pinmalloc.ErrOutOfMemory where memory ran out, else pinmalloc.ErrRefused, "no event" said
// once. A Batcher made again calibrates. Before, the driver's error came bare
// ("copyengine: calibrating the copy engine (using kernel for every batch): cuda:
// CUDA_ERROR_INVALID_VALUE: fake driver error"), matching pinmalloc.ErrInvalidValue alone.
func TestCalibrationNoEventSaysTheRefusal(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, c := range fakecuda.EventRefusals(pinmalloc.ErrOutOfMemory, pinmalloc.ErrRefused) {
		forgetCalibrations()
		f.FailAfter(fakecuda.CallEventCreate, 0, c.Code)
		b := newBatcher(t, dev, Options{})
		_, err := b.Calibration()
		if !errors.Is(err, ErrNotCalibrated) || !errors.Is(err, streamq.ErrNoEvent) || !errors.Is(err, c.Want) ||
			strings.Count(err.Error(), "no event") != 1 {
			t.Errorf("calibration with cuEventCreate refused (%d): %v; want ErrNotCalibrated, streamq.ErrNoEvent and %v, \"no event\" said once",
				c.Code, err, c.Want)
		}
		if _, err := newBatcher(t, dev, Options{}).Calibration(); err != nil {
			t.Errorf("calibration again: %v", err)
		}
	}
}
