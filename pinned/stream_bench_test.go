package pinned_test

import (
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// BenchmarkFakeFreeAsyncPair is a 4 KiB Alloc and free pair of a CUDAHost pool on the fake
// driver, in the same run: Free (no stream recorded), FreeAsync on a stream with nothing
// queued (the buffer comes back at the next reclaim, after a cuStreamQuery and no event), and
// RecordStream then Free. events/op counts cuEventRecord calls.
func BenchmarkFakeFreeAsyncPair(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	dev := f.Open(b, 0)
	s, err := dev.StreamCreate(true)
	if err != nil {
		b.Fatal(err)
	}
	defer dev.StreamDestroy(s)
	p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const n = 4 << 10
	for _, c := range []struct {
		name string
		free func([]byte) error
	}{
		{"Free", p.Free},
		{"FreeAsync", func(buf []byte) error { return p.FreeAsync(buf, pcuda.Stream(s)) }},
		{"RecordStream+Free", func(buf []byte) error {
			if err := p.RecordStream(buf, pcuda.Stream(s)); err != nil {
				return err
			}
			return p.Free(buf)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			events := f.Stat(fakecuda.EventRecords)
			b.ReportAllocs()
			for range b.N {
				buf, err := p.Alloc(n)
				if err == nil {
					err = c.free(buf)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(f.Stat(fakecuda.EventRecords)-events)/float64(b.N), "events/op")
		})
	}
}
