package copyengine

import (
	"fmt"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// Benchmarks of the Batcher's three methods moving 16 MiB batches of scattered 4 KiB, 64 KiB
// and 1 MiB blocks each way. BenchmarkBatcher runs against the fake driver with data movement
// off (fakecuda SkipData): it measures the CPU cost of queueing a batch (job checks, staging,
// cgo and driver calls), reported per job as ns/job. BenchmarkCUDABatcher runs the same on a
// real GPU (it skips without one) and reports throughput too. cpu-ns/job is the process's CPU
// time per job, which a busy machine distorts less than the wall-clock ns/job.

// benchBatchBytes is the bytes of one batch.
const benchBatchBytes = 16 << 20

var benchBlockSizes = []uintptr{4 << 10, 64 << 10, 1 << 20}

func BenchmarkBatcher(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	f.SkipData(true)
	benchBatcher(b, f.Open(b, 0), false)
}

func BenchmarkCUDABatcher(b *testing.B) {
	benchBatcher(b, fakecuda.GPU(b, 0), true)
}

// benchBatcher runs every method, direction and block size. Each iteration queues one batch;
// the stream is synchronized once at the end, so on a GPU the figure is the sustained rate.
func benchBatcher(b *testing.B, dev *cuda.Device, gpu bool) {
	s, err := dev.StreamCreate(true)
	must(b, "StreamCreate", err)
	b.Cleanup(func() { must(b, "StreamDestroy", dev.StreamDestroy(s)) })
	host, d := hostMem(b, dev, 2*benchBatchBytes), devMem(b, dev, 2*benchBatchBytes)
	for _, o := range []Options{{Method: MethodKernel}, {Method: MethodKernel, TrustNoOverlap: true},
		{Method: MethodBatchAPI}, {Method: MethodPerCopy}} {
		bt, err := New(public(dev), o)
		if err != nil {
			b.Logf("%s: %v", o.Method, err)
			continue
		}
		name := o.Method.String()
		if o.TrustNoOverlap {
			name += "-trusted"
		}
		b.Cleanup(func() { must(b, "Close", bt.Close()) })
		for _, dir := range []string{"DtoH", "HtoD"} {
			for _, size := range benchBlockSizes {
				b.Run(fmt.Sprintf("%s/%s/%dKiB", name, dir, size>>10), func(b *testing.B) {
					jobs := benchJobs(host, d, size, dir == "DtoH")
					if gpu {
						b.SetBytes(benchBatchBytes)
					}
					b.ResetTimer()
					cpu0 := cpuTime(b)
					for i := 0; i < b.N; i++ {
						if err := bt.Copy(jobs, pcuda.Stream(s)); err != nil {
							b.Fatal(err)
						}
					}
					must(b, "StreamSynchronize", dev.StreamSynchronize(s))
					perJob := float64(b.N * len(jobs))
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perJob, "ns/job")
					b.ReportMetric(float64(cpuTime(b)-cpu0)/perJob, "cpu-ns/job")
				})
			}
		}
	}
}

// cpuTime returns the CPU time (user and system) this process has used, in nanoseconds: unlike
// the wall clock it does not count the time other processes of a busy machine take.
func cpuTime(b *testing.B) int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchJobs scatters a batch of blocks of the given size: block i of the host side goes to a
// random slot of the device side (slots at twice the block size), or back.
func benchJobs(host, d uintptr, size uintptr, toHost bool) []Job {
	n := benchBatchBytes / int(size)
	rng := rand.New(rand.NewPCG(uint64(size), 3))
	perm := rng.Perm(n)
	jobs := make([]Job, n)
	for i, p := range perm {
		h, dv := host+uintptr(i)*2*size, d+uintptr(p)*2*size
		if toHost {
			jobs[i] = mkJob(h, dv, size)
		} else {
			jobs[i] = mkJob(dv, h, size)
		}
	}
	return jobs
}
