package copyengine

import (
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestPerThreadStreamRefused: the per-thread default stream (CU_STREAM_PER_THREAD, handle 2)
// names the default stream of whichever OS thread makes a driver call, and a goroutine moves
// between threads from one call to the next: a launch and the staging event recorded after it
// could land on two streams (the buffer reused under the launch), and two batches on two
// threads' streams are not ordered. Copy refuses it with ErrInvalidStream before anything is
// queued, as package device and package pinned refuse it; before, it took it.
func TestPerThreadStreamRefused(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	host, d := hostMem(t, dev, 4096), devMem(t, dev, 4096)
	for _, m := range []Method{MethodKernel, MethodBatchAPI, MethodPerCopy} {
		b := newBatcher(t, dev, Options{Method: m, LowPriority: m == MethodKernel})
		calls := f.Launches() + f.Batches() + f.Memcpys() + f.Stat(fakecuda.EventRecords)
		err := b.Copy([]Job{mkJob(d, host, 4096)}, pcuda.Stream(2))
		if !errors.Is(err, ErrInvalidStream) || !errors.Is(err, pinmalloc.ErrInvalidStream) {
			t.Errorf("%s: Copy on the per-thread default stream: %v, want ErrInvalidStream", m, err)
		}
		if now := f.Launches() + f.Batches() + f.Memcpys() + f.Stat(fakecuda.EventRecords); now != calls {
			t.Errorf("%s: the refused Copy queued work", m)
		}
	}
}
