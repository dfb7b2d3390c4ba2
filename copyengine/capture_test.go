package copyengine

import (
	"errors"
	"runtime"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestCopyDuringCapture: Copy on a stream that captures a CUDA graph, or on the legacy stream
// while a blocking stream captures, is refused with an error matching pinmalloc.ErrCapturing
// before anything is queued, with every method; the user's capture stays valid, and a Copy on
// the stream once the capture has ended moves the bytes. Before, the kernel method captured
// its launch and the staging buffer's event into the user's graph (the buffer, which the next
// Copy rewrites, read again at every launch of the graph), and a Copy on the legacy stream
// invalidated the capture.
func TestCopyDuringCapture(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	const n = 4096
	host, out, d := hostMem(t, dev, n), hostMem(t, dev, n), devMem(t, dev, n)
	runtime.LockOSThread() // a capture ends on the thread that began it
	defer runtime.UnlockOSThread()
	for _, c := range []struct {
		m   Method
		low bool
	}{{MethodKernel, false}, {MethodKernel, true}, {MethodBatchAPI, false}, {MethodPerCopy, false}} {
		b := newBatcher(t, dev, Options{Method: c.m, LowPriority: c.low})
		s, err := dev.StreamCreate(false) // blocking: the legacy stream depends on its capture
		must(t, "StreamCreate", err)
		for _, on := range []cuda.Stream{s, 0} {
			must(t, "StreamBeginCapture", dev.StreamBeginCapture(s, cuda.CaptureThreadLocal))
			calls := queuedWork(f) + f.Stat(fakecuda.StreamWaits)
			err := b.Copy([]Job{mkJob(d, host, n)}, pcuda.Stream(on))
			if !errors.Is(err, pinmalloc.ErrCapturing) {
				t.Errorf("%s (low priority %v): Copy on stream %#x while %#x captures: %v, want ErrCapturing", c.m, c.low, on, s, err)
			}
			if now := queuedWork(f) + f.Stat(fakecuda.StreamWaits); now != calls {
				t.Errorf("%s (low priority %v): the refused Copy on stream %#x made %d driver calls that queue work", c.m, c.low, on, now-calls)
			}
			g, err := dev.StreamEndCapture(s)
			if err != nil || g == 0 {
				t.Errorf("%s (low priority %v): after a Copy on stream %#x, the capture ended with graph %#x, %v; want a graph", c.m, c.low, on, g, err)
			} else {
				must(t, "GraphDestroy", dev.GraphDestroy(g))
			}
		}
		hb := mem.Bytes(host, n)
		for i := range hb {
			hb[i] = byte(i*7) + byte(c.m)
		}
		must(t, "Copy after the capture", b.Copy([]Job{mkJob(d, host, n)}, pcuda.Stream(s)))
		must(t, "StreamSynchronize", dev.StreamSynchronize(s))
		must(t, "MemcpyDtoH", dev.MemcpyDtoH(out, d, n))
		got := mem.Bytes(out, n)
		for i := range got {
			if got[i] != byte(i*7)+byte(c.m) {
				t.Fatalf("%s: byte %d after the capture's end: %d", c.m, i, got[i])
			}
		}
		must(t, "StreamDestroy", dev.StreamDestroy(s))
	}
}
