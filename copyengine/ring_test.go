package copyengine

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestStagingRingTakesAnIdleBuffer: with the ring full and its oldest buffer read by a launch
// still queued on one stream, a Copy on another stream takes a buffer whose launch has
// completed instead of waiting for the oldest. Before, it waited (cuEventSynchronize) for the
// launch on the other stream whenever the oldest buffer was busy, though the package doc
// says it waits only when all are in flight: a Copy blocked the host, and every other Copy
// behind the Batcher's mutex, until unrelated work on another stream had run.
func TestStagingRingTakesAnIdleBuffer(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	b := newBatcher(t, dev, Options{Method: MethodKernel})
	slow, fast := newStream(t, dev), newStream(t, dev)
	const n = 4096
	host, d := hostMem(t, dev, 2*maxStages*n), devMem(t, dev, 2*maxStages*n)
	fill(mem.Bytes(host, 2*maxStages*n), 7)
	f.Hold(true)
	defer f.Hold(false)
	must(t, "Copy on the slow stream", b.Copy([]Job{mkJob(d, host, n)}, pcuda.Stream(slow)))
	for i := uintptr(1); i < maxStages; i++ {
		must(t, "Copy on the fast stream", b.Copy([]Job{mkJob(d+i*n, host+i*n, n)}, pcuda.Stream(fast)))
	}
	if len(b.stages) != maxStages {
		t.Fatalf("%d staging buffers after %d held launches, want %d", len(b.stages), maxStages, maxStages)
	}
	f.CompleteStream(fast) // the fast stream's launches are done; the slow one's is not
	last := uintptr(maxStages)
	must(t, "Copy with the oldest buffer busy", b.Copy([]Job{mkJob(d+last*n, host+last*n, n)}, pcuda.Stream(fast)))
	if err := dev.StreamQuery(slow); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("slow stream after a Copy on the fast stream found idle staging buffers: %v, want "+
			"not ready (the Copy waited for the slow stream's launch)", err)
	}
	if len(b.stages) != maxStages {
		t.Errorf("%d staging buffers, want %d", len(b.stages), maxStages)
	}
	f.Hold(false)
	f.Complete()
	if !bytes.Equal(mem.Bytes(d, (last+1)*n), mem.Bytes(host, (last+1)*n)) {
		t.Error("the batches did not move their bytes")
	}
}
