package copyengine

import (
	"bytes"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestLostStageStreamReused: a lost staging buffer (loseLaunch) whose launch's stream s1 the
// user destroys without synchronizing it, the launch still queued, and whose handle the driver
// gives to a new stream s2. Close cannot tell s2 from s1 (it never found s1's handle refused):
// its synchronize of the handle (waitLost) waits for s2, and the buffer is retired. That is
// safe only because the buffer's one change of owner is its cuMemFreeHost, which synchronizes
// the context first (fakedriver.c.in's rules), so the launch runs, reading its jobs, before
// the buffer goes: this test fails if a lost buffer is ever freed (or reused) on the strength
// of its stream handle alone, as the launch would then read freed memory (a fault) or another
// batch's jobs.
func TestLostStageStreamReused(t *testing.T) {
	const n = 4096
	f, dev, b, host, d := stagingRig(t, n, n)
	if f == nil {
		return
	}
	h := mem.Bytes(host, n)
	fill(h, 7)
	want := bytes.Clone(h)
	s1, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	f.Hold(true)
	defer f.Hold(false)
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	loseLaunch(t, f, dev, b, mkJob(d, host, n), s1)
	must(t, "StreamDestroy, its launch still queued", dev.StreamDestroy(s1))
	s2, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	t.Cleanup(func() { must(t, "StreamDestroy", dev.StreamDestroy(s2)) })
	if s2 != s1 {
		t.Fatalf("the fake gave the new stream handle %#x, not the destroyed stream's %#x: the test proves nothing", s2, s1)
	}
	if f.Pending() == 0 {
		t.Fatal("the lost launch ran before Close: the test proves nothing")
	}
	must(t, "Close", b.Close())
	if len(b.lost) != 0 || len(b.retired) != 0 {
		t.Fatalf("after Close: %d lost and %d retired staging buffers kept, want none", len(b.lost), len(b.retired))
	}
	must(t, "synchronize the context after Close", dev.Synchronize()) // no fault: nothing ran on freed memory
	if !bytes.Equal(mem.Bytes(d, n), want) {
		t.Error("the lost launch, on the destroyed stream, did not copy its batch: its staging buffer went before it ran")
	}
}
