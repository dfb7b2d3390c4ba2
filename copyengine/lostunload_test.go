package copyengine

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestLostLaunchReusedHandleFreeRefusedKeepsKernel: a lost staging buffer (loseLaunch) whose
// launch's stream s1 the user destroys, the launch still queued, and whose handle the driver
// gives to a new stream s2: Close's synchronize of the handle (waitLost) waits for s2, not for
// the launch, and retires the buffer, which only its cuMemFreeHost (it synchronizes the
// context) makes safe to give back (TestLostStageStreamReused). When the driver refuses that
// free, the launch may still be queued: the gather kernel's module must stay loaded, as it
// does while a buffer is lost (TestCloseKeepsKernelOfLostLaunch), until the Close whose free
// of the buffer succeeds. Before, that Close unloaded the module under the queued launch.
func TestLostLaunchReusedHandleFreeRefusedKeepsKernel(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, n, n)
	if f == nil {
		return
	}
	h := mem.Bytes(host, n)
	fill(h, 9)
	want := bytes.Clone(h)
	s1, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	f.Hold(true)
	defer f.Hold(false)
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	modules := f.Modules()
	loseLaunch(t, f, dev, b, mkJob(d, host, n), s1)
	must(t, "StreamDestroy, its launch still queued", dev.StreamDestroy(s1))
	s2, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	t.Cleanup(func() { must(t, "StreamDestroy", dev.StreamDestroy(s2)) })
	if s2 != s1 {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x: the test proves nothing", s2, s1)
	}
	f.FailAfter(fakecuda.CallFreeHost, 0, fakecuda.ResultInvalidValue) // Close's free of the buffer
	err = b.Close()
	t.Logf("Close whose free of the lost buffer is refused: %v", err)
	if err == nil {
		t.Fatal("Close whose free of the lost buffer is refused returned nil")
	}
	if f.Pending() == 0 {
		t.Fatal("the lost launch ran before the module's fate: the test proves nothing")
	}
	if now := f.Modules(); now != modules {
		t.Errorf("%d modules loaded after a Close that kept the buffer of a launch still queued, want %d: "+
			"the kernel was unloaded under the launch", now, modules)
	}
	must(t, "Close again", b.Close())
	if now := f.Modules(); now != modules-1 {
		t.Errorf("%d modules loaded after the Close that freed the buffer, want %d", now, modules-1)
	}
	must(t, "synchronize the context after Close", dev.Synchronize())
	if !bytes.Equal(mem.Bytes(d, n), want) {
		t.Error("the lost launch did not copy its batch")
	}
}
