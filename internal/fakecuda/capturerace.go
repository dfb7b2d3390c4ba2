package fakecuda

import (
	"runtime"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Helpers for the tests that put a user's capture between a check of the library's and the act
// the check allows (the capture gate, cuda.EventRecordOutsideCapture's second ask).

// PauseAfterCaptureCheck arms dev's capture-check hook (cuda.Device.HookCaptureCheck): the
// library's next check that finds a stream not capturing makes the driver call it allows stop,
// as PauseNextCall does, until ResumeCall; the test begins a capture meanwhile.
func (d *Driver) PauseAfterCaptureCheck(dev *cuda.Device) error {
	return d.PauseAfterCaptureChecks(dev, 0)
}

// PauseAfterCaptureChecks is PauseAfterCaptureCheck of the check after skip others that find a
// stream not capturing: a test stops a record's ask (cuda.Device.EventRecordOutsideCapture)
// that follows a check of its own (Points.Capturing).
func (d *Driver) PauseAfterCaptureChecks(dev *cuda.Device, skip int) error {
	return dev.HookCaptureCheck("fake_ctl", int(ctlPause), skip)
}

// WaitUntil waits until cond holds, or resumes a paused call (ResumeCall) and fails tb with why.
func (d *Driver) WaitUntil(tb testing.TB, why string, cond func() bool) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			d.ResumeCall()
			tb.Fatal(why)
		}
	}
}

// WaitPaused waits until a call PauseNextCall or PauseAfterCaptureCheck stopped waits, or fails
// tb.
func (d *Driver) WaitPaused(tb testing.TB) {
	tb.Helper()
	d.WaitUntil(tb, "no driver call stopped after the check", d.Paused)
}

// LockedThread returns a function that runs calls on one goroutine locked to its OS thread for
// tb's lifetime (a capture outside CaptureRelaxed ends on the thread that began it); each
// call's error comes back on the channel it returns.
func LockedThread(tb testing.TB) func(func() error) <-chan error {
	calls := make(chan func(), 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for c := range calls {
			c()
		}
	}()
	tb.Cleanup(func() { close(calls) })
	return func(f func() error) <-chan error {
		done := make(chan error, 1)
		calls <- func() { done <- f() }
		return done
	}
}

// BeginDuringPause begins a capture with begin on th (LockedThread) while the call that
// PauseAfterCaptureCheck stopped waits (WaitPaused first), until the capture has begun or waits
// for the capture gate (cuda.CaptureBeginsWaiting), then resumes the call. began reports that
// the capture began while the call waited: nothing held it off. Once the paused call has
// returned, begun gives begin's error (a capture held off begins when the call lets it).
func (d *Driver) BeginDuringPause(tb testing.TB, th func(func() error) <-chan error, begin func() error) (began bool, begun func() error) {
	tb.Helper()
	d.WaitPaused(tb)
	ch := th(begin)
	var err error
	d.WaitUntil(tb, "the capture neither began nor waited for the capture gate", func() bool {
		select {
		case err = <-ch:
			began = true
			return true
		default:
			return cuda.CaptureBeginsWaiting() > 0
		}
	})
	d.ResumeCall()
	return began, func() error {
		if began {
			return err
		}
		return <-ch
	}
}
