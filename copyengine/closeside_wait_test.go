package copyengine

import (
	"errors"
	"strings"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCloseKeepsSideStreamWhoseWaitFails: a Close whose wait for the Batcher's own stream (the
// LowPriority side stream) the driver refuses says so in the package's words and keeps the
// stream, as it keeps one whose destroy is refused; the next Close waits for it, destroys it
// once and returns nil. Before, Close destroyed the stream all the same and returned the
// driver's bare error (no word of what failed, nothing kept), which the next Close, having
// nothing left to give back, answered with nil.
func TestCloseKeepsSideStreamWhoseWaitFails(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	host, d := hostMem(t, dev, n), devMem(t, dev, n)
	streams := f.Stat(fakecuda.Streams)
	b, err := New(public(dev), Options{Method: MethodKernel, LowPriority: true})
	must(t, "New", err)
	must(t, "Copy", b.Copy([]Job{mkJob(d, host, n)}, 0))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0))
	f.FailAfter(fakecuda.CallStreamSync, 0, fakecuda.ResultInvalidValue) // Close's wait for its stream
	err = b.Close()
	if !errors.Is(err, pcuda.ErrInvalidValue) || !strings.HasPrefix(err.Error(), "copyengine: ") {
		t.Errorf("Close whose wait for its stream is refused: %v, want the driver's error, said by copyengine", err)
	}
	if got := f.Stat(fakecuda.Streams); got != streams+1 {
		t.Errorf("%d streams after the refused wait, want %d: the stream it could not wait for is kept", got, streams+1)
	}
	must(t, "Close again", b.Close())
	if got := f.Stat(fakecuda.Streams); got != streams {
		t.Errorf("%d streams after the second Close, want %d", got, streams)
	}
	must(t, "a third Close", b.Close())
}
