package device

import (
	"fmt"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// benchHeap opens device 0 of the fake, makes a heap on it with o and a stream, all closed at
// the benchmark's cleanup.
func benchHeap(b *testing.B, f *fakecuda.Driver, o Options) (*cuda.Device, *Heap, cuda.Stream) {
	dev := f.Open(b, 0)
	h, err := New(public(dev), o)
	must(b, "New", err)
	b.Cleanup(func() { must(b, "Close", h.Close()) })
	s, err := dev.StreamCreate(true)
	must(b, "StreamCreate", err)
	b.Cleanup(func() {
		must(b, "ForgetStream", h.ForgetStream(pcuda.Stream(s)))
		must(b, "StreamDestroy", dev.StreamDestroy(s))
	})
	return dev, h, s
}

// BenchmarkHeapBulk allocates a 16 MiB batch of blocks on one stream, then frees them all, as
// the uvm tier does for a restore and an eviction's completion; it reports ns per block
// allocated and freed.
func BenchmarkHeapBulk(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	_, h, s := benchHeap(b, f, Options{Capacity: 64 << 20, PurgeDelay: -1})
	for _, size := range []uintptr{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			ps := make([]uintptr, (16<<20)/size)
			var alloc, free time.Duration
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				for k := range ps {
					p, err := h.Alloc(int(size), pcuda.Stream(s))
					if err != nil {
						b.Fatal(err)
					}
					ps[k] = uintptr(p)
				}
				t1 := time.Now()
				for _, p := range ps {
					if err := h.Free(pcuda.DevicePtr(p)); err != nil {
						b.Fatal(err)
					}
				}
				alloc, free = alloc+t1.Sub(t0), free+time.Since(t1)
			}
			n := float64(b.N * len(ps))
			b.ReportMetric(float64(alloc.Nanoseconds())/n, "ns/alloc")
			b.ReportMetric(float64(free.Nanoseconds())/n, "ns/free")
		})
	}
}

// BenchmarkFakeCrossStreamFree is the cycle of a block used on one stream and freed on another:
// Alloc on stream a (whose poll does the frees b has passed), FreeAsync on stream b, in runs
// of batch blocks (batch Allocs, then batch FreeAsync). Against the fake (no Hold: a query
// runs the work), it measures the CPU cost of the calls, per block; events/free counts
// the cuEventRecord calls per free.
func BenchmarkFakeCrossStreamFree(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	dev, h, sa := benchHeap(b, f, Options{Capacity: 64 << 20, PurgeDelay: -1})
	sb, err := dev.StreamCreate(true)
	must(b, "StreamCreate", err)
	b.Cleanup(func() {
		must(b, "ForgetStream", h.ForgetStream(pcuda.Stream(sb)))
		must(b, "StreamDestroy", dev.StreamDestroy(sb))
	})
	for _, batch := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch%d", batch), func(b *testing.B) {
			ps := make([]pcuda.DevicePtr, batch)
			events := f.Stat(fakecuda.EventRecords)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for k := range ps {
					p, err := h.Alloc(4<<10, pcuda.Stream(sa))
					if err != nil {
						b.Fatal(err)
					}
					ps[k] = p
				}
				for _, p := range ps {
					if err := h.FreeAsync(p, pcuda.Stream(sb)); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			frees := float64(b.N * batch)
			b.ReportMetric(float64(f.Stat(fakecuda.EventRecords)-events)/frees, "events/free")
			must(b, "Sync", h.Sync())
		})
	}
}

// BenchmarkFakePair is an allocation and its free on the same stream, the device heap's hot
// path, with the idle purge on (the default) and off: ns per pair.
func BenchmarkFakePair(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	for _, size := range []int{64, 4 << 10, 64 << 10} {
		for _, delay := range []time.Duration{0, -1} {
			name := map[bool]string{true: "purge", false: "nopurge"}[delay == 0]
			b.Run(fmt.Sprintf("%dB/%s", size, name), func(b *testing.B) { benchPair(b, f, size, delay) })
		}
	}
}

// benchPair is BenchmarkFakePair of one size, on a heap with purge delay delay.
func benchPair(b *testing.B, f *fakecuda.Driver, size int, delay time.Duration) {
	_, h, s := benchHeap(b, f, Options{Capacity: 64 << 20, PurgeDelay: delay})
	for b.Loop() {
		p, err := h.Alloc(size, pcuda.Stream(s))
		if err != nil {
			b.Fatal(err)
		}
		if err := h.FreeAsync(p, pcuda.Stream(s)); err != nil {
			b.Fatal(err)
		}
	}
}
