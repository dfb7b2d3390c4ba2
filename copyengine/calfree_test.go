package copyengine

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCalibrationKeepsRefusedHostFree: a calibration whose cuMemFreeHost of its pinned buffer
// the driver refuses keeps the buffer, and the Batcher's Close frees it. Before, the buffer's
// address was dropped with the calibration's error (seen only through Calibration): 4 MiB of
// pinned memory leaked for the life of the process, which no Close could give back.
func TestCalibrationKeepsRefusedHostFree(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	forgetCalibrations()
	hostAllocs := f.LiveObjects()["host allocs"]
	f.FailAfter(fakecuda.CallFreeHost, 0, fakecuda.ResultInvalidValue)
	b, err := New(public(dev), Options{})
	must(t, "New", err)
	if _, err := b.Calibration(); !errors.Is(err, pinmalloc.ErrInvalidValue) {
		t.Errorf("calibration whose buffer's free was refused: %v, want the driver's refusal", err)
	}
	must(t, "Close", b.Close())
	if now := f.LiveObjects()["host allocs"]; now != hostAllocs {
		t.Errorf("%d host allocations after Close, want %d: the calibration's buffer leaked", now, hostAllocs)
	}
}
