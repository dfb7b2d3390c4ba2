package copyengine

import (
	"errors"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestCloseKeepsKernelOfLostLaunch: a Close that cannot confirm a lost launch done (loseLaunch;
// a RELAXED capture then holds the launch's stream, so Close returns ErrBusy and keeps the
// staging buffer the launch reads) keeps the gather kernel's module loaded too: the launch still
// queued runs its code. The Close that confirms the launch done unloads it. Before, the first
// Close unloaded the module under the queued launch, whose job array it kept.
func TestCloseKeepsKernelOfLostLaunch(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, n, n)
	if f == nil {
		return
	}
	s1 := newStream(t, dev)
	f.Hold(true)
	defer f.Hold(false)
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	modules := dev.Stats().Modules
	loseLaunch(t, f, dev, b, mkJob(d, host, n), s1)
	end := captureOn(t, dev, s1, cuda.CaptureRelaxed)
	if err := b.Close(); !errors.Is(err, pinmalloc.ErrBusy) {
		t.Fatalf("Close while a capture holds the stream of a lost launch: %v, want ErrBusy", err)
	}
	if now := dev.Stats().Modules; now != modules {
		t.Errorf("%d modules loaded after a Close that kept a lost launch's staging buffer, want %d: "+
			"the kernel was unloaded under the launch", now, modules)
	}
	if err := end(); err != nil {
		t.Fatalf("the capture across Close: %v", err)
	}
	must(t, "Close once the launch's stream can be synchronized", b.Close())
	if now := dev.Stats().Modules; now != modules-1 {
		t.Errorf("%d modules loaded after the Close that freed the lost buffer, want %d", now, modules-1)
	}
}
