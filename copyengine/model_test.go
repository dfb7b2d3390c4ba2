package copyengine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"

	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestBatcherModel checks the Batchers' stream order against a model over long random
// sequences: four Batchers (the kernel on the caller's stream and on the low-priority side
// stream, the batch API, one copy per job) move scattered blocks between the buffers of four
// lanes, each lane a stream (the legacy one among them) with pinned host and device buffers
// of its own, while the fake holds or completes queued work at random, so that the staging
// ring fills, buffers are reused and side-stream batches wait on their fences. Each copy
// reads what the lane's earlier copies wrote, so a batch that runs out of its stream's order,
// or a staging buffer rewritten under a launch not yet run, leaves bytes the model does not
// have. PINMALLOC_LONG=1 runs 40 seeds, the default 2. Each of these planted bugs fails both
// default seeds: a ring that takes a busy buffer for idle (and 40 of the 40 long seeds), a
// side-stream kernel not fenced to or from the caller's stream (40 of 40 each), a
// legacy-stream batch not fenced back (36 of 40).
func TestBatcherModel(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	seeds := 2
	if os.Getenv("PINMALLOC_LONG") != "" && !testing.Short() {
		seeds = 40
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { batcherModel(t, f, dev, seed) })
	}
}

func batcherModel(t *testing.T, f *fakecuda.Driver, dev *cuda.Device, seed uint64) {
	bs := []*Batcher{
		newBatcher(t, dev, Options{Method: MethodKernel}),
		newBatcher(t, dev, Options{Method: MethodKernel, LowPriority: true}),
		newBatcher(t, dev, Options{Method: MethodBatchAPI}),
		newBatcher(t, dev, Options{Method: MethodPerCopy}),
	}
	const lanes, bufs, blocks, size = 4, 3, 16, 4096
	type lane struct {
		s     cuda.Stream
		bufs  [bufs]uintptr // even: pinned host memory mapped for the device; odd: device memory
		model [bufs][]byte
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	var ls []*lane
	for i := range lanes {
		l := &lane{}
		if i > 0 { // lane 0 is on the legacy stream
			l.s = newStream(t, dev)
		}
		for j := range l.bufs {
			l.model[j] = make([]byte, blocks*size)
			if j%2 == 0 {
				l.bufs[j] = hostMem(t, dev, blocks*size)
				fill(l.model[j], seed*100+uint64(i*10+j))
				copy(mem.Bytes(l.bufs[j], blocks*size), l.model[j])
			} else {
				l.bufs[j] = uintptr(devMem(t, dev, blocks*size))
				must(t, "MemsetD8", dev.MemsetD8(l.bufs[j], 0, blocks*size))
			}
		}
		ls = append(ls, l)
	}
	must(t, "Synchronize", dev.Synchronize())
	defer f.Hold(false)
	for range 1500 {
		switch rng.IntN(20) {
		case 0:
			f.Hold(true)
		case 1:
			f.Hold(false)
		case 2:
			f.Complete()
		}
		l := ls[rng.IntN(lanes)]
		from, to := rng.IntN(bufs), rng.IntN(bufs)
		if from == to {
			continue
		}
		perm := rng.Perm(blocks)
		jobs := make([]Job, 1+rng.IntN(blocks))
		for i := range jobs {
			jobs[i] = mkJob(l.bufs[to]+uintptr(i)*size, l.bufs[from]+uintptr(perm[i])*size, size)
			copy(l.model[to][i*size:(i+1)*size], l.model[from][perm[i]*size:(perm[i]+1)*size])
		}
		b := bs[rng.IntN(len(bs))]
		must(t, fmt.Sprintf("Copy (%s)", b.Method()), b.Copy(jobs, pcuda.Stream(l.s)))
	}
	f.Hold(false)
	must(t, "Synchronize", dev.Synchronize())
	// Pinned, which also keeps it off the stack: a stack buffer (64 KiB fits one) moves when
	// the stack grows, and the driver would write where it was, given its address as a uintptr.
	got := make([]byte, blocks*size)
	var pin runtime.Pinner
	pin.Pin(&got[0])
	defer pin.Unpin()
	for i, l := range ls {
		for j := range l.bufs {
			must(t, "MemcpyDtoH", dev.MemcpyDtoH(mem.Addr(got), l.bufs[j], blocks*size))
			if !bytes.Equal(got, l.model[j]) {
				t.Errorf("lane %d (stream %#x), buffer %d: the bytes are not what the copies in stream order make", i, l.s, j)
			}
		}
	}
}
