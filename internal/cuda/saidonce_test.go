//go:build cgo && linux

package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/pinmalloc/pinmalloc"
)

// TestCudaSaidOnce: an error that wraps a failed driver call, or a sentinel, says "cuda:" once,
// at its start. Result's text and the sentinels' begin with "cuda: ", and the package's wraps
// put "cuda: " before them: Open of a missing ordinal said "cuda: device 1: cuda:
// CUDA_ERROR_INVALID_DEVICE: ...", a refused push "cuda: push primary context: cuda: ...", a
// bad capture mode "cuda: capture mode 9: cuda: invalid value".
func TestCudaSaidOnce(t *testing.T) {
	with, _ := buildFake(t)
	dr, err := loadFrom(with)
	must(t, "loadFrom", err)
	defer dr.close()
	must(t, "init", dr.init())
	d, err := openOn(dr, 0)
	must(t, "openOn", err)
	defer d.Close()
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer d.StreamDestroy(s)
	ev, err := d.EventCreate(true)
	must(t, "EventCreate", err)
	defer d.EventDestroy(ev)

	_, errOpen := openOn(dr, 1)
	bad := &Device{drv: dr, ordinal: 0, dev: d.dev, ctx: 0xbad}
	bad.calls.init()
	_, errIsCap := bad.StreamIsCapturing(s)
	_, errRecord := bad.EventRecordOutsideCapture(ev, s)
	_, errMode := d.ThreadExchangeCaptureMode(9)
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"openOn(1)", errOpen, pinmalloc.ErrNoDevice},
		{"Do in a refused context", bad.Do(func() error { return nil }), resultInvalidContext},
		{"StreamQuery in a refused context", bad.StreamQuery(s), resultInvalidContext},
		{"StreamIsCapturing in a refused context", errIsCap, resultInvalidContext},
		{"EventRecordOutsideCapture in a refused context", errRecord, resultInvalidContext},
		{"StreamBeginCapture(mode 9)", d.StreamBeginCapture(s, 9), pinmalloc.ErrInvalidValue},
		{"ThreadExchangeCaptureMode(9)", errMode, pinmalloc.ErrInvalidValue},
	} {
		if c.err == nil || !errors.Is(c.err, c.want) {
			t.Errorf("%s = %v, want an error matching %v", c.name, c.err, c.want)
			continue
		}
		msg := c.err.Error()
		if strings.Count(msg, "cuda:") != 1 || !strings.HasPrefix(msg, "cuda: ") {
			t.Errorf("%s: %q says \"cuda:\" %d times; want once, at its start", c.name, msg,
				strings.Count(msg, "cuda:"))
		}
	}
	var r Result
	if !errors.As(errOpen, &r) || r != resultInvalidDevice {
		t.Errorf("openOn(1) = %v: errors.As finds Result %d, want 101", errOpen, int(r))
	}
}
