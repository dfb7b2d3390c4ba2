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

// TestCalibrationKeepsRefusedDeviceFree: a calibration whose cuMemFree of its device buffer the
// driver refuses keeps the buffer, and the Batcher's Close frees it; so with its stream and an
// event whose destroys are refused. Before, each was dropped with the calibration's error (seen
// only through Calibration): 4 MiB of device memory, a stream and an event leaked for the life
// of the process, which no Close could give back.
func TestCalibrationKeepsRefusedDeviceFree(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	forgetCalibrations()
	used, streams, events := f.Used(0), f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events)
	f.FailAfter(fakecuda.CallMemFree, 0, fakecuda.ResultInvalidValue)
	f.FailAfter(fakecuda.CallStreamDestroy, 0, fakecuda.ResultInvalidHandle)
	f.FailAfter(fakecuda.CallEventDestroy, 1, fakecuda.ResultInvalidHandle)
	b, err := New(public(dev), Options{})
	must(t, "New", err)
	_, err = b.Calibration()
	if !errors.Is(err, pinmalloc.ErrInvalidValue) || !errors.Is(err, pinmalloc.ErrInvalidHandle) {
		t.Errorf("calibration whose device buffer's free and stream's destroy were refused: %v, "+
			"want the driver's refusals", err)
	}
	must(t, "Close", b.Close())
	if now := f.Used(0); now != used {
		t.Errorf("%d bytes of device memory used after Close, want %d: the calibration's buffer leaked",
			now, used)
	}
	if s, e := f.Stat(fakecuda.Streams), f.Stat(fakecuda.Events); s != streams || e != events {
		t.Errorf("%d streams and %d events after Close, want %d and %d: the calibration's leaked",
			s, e, streams, events)
	}
	must(t, "Close again", b.Close())
}
