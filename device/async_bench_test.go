package device

import (
	"fmt"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// BenchmarkFakeStagedCopy is the staging loop of a program that copies through a CUDAHost pool:
// Alloc a buffer, HtoDAsync from it, Free it at once (its reuse waits for the stream: the copy
// recorded the stream on it), and synchronize the stream every 64 copies. Against the fake,
// what it measures is the CPU cost of the calls (the fake copies nothing: SkipData);
// events/op counts cuEventRecord calls per copy.
func BenchmarkFakeStagedCopy(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	f.SkipData(true)
	dev, h, s := benchHeap(b, f, Options{Capacity: 64 << 20})
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 64 << 20})
	must(b, "pinned.New", err)
	b.Cleanup(func() { must(b, "pool Close", pool.Close()) })
	for _, n := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			d, err := h.Alloc(int(n), pcuda.Stream(s))
			must(b, "Alloc", err)
			events := f.Stat(fakecuda.EventRecords)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				buf, err := pool.Alloc(n)
				if err == nil {
					err = h.HtoDAsync(d, buf, pcuda.Stream(s))
				}
				if err == nil {
					err = pool.Free(buf)
				}
				if err == nil && i%64 == 63 {
					err = dev.StreamSynchronize(s)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(f.Stat(fakecuda.EventRecords)-events)/float64(b.N), "events/op")
			must(b, "StreamSynchronize", dev.StreamSynchronize(s))
			must(b, "Free", h.Free(d))
		})
	}
}
