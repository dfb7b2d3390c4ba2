package cudamem_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// BenchmarkFakeDeviceZero clears 4 KiB of device memory through the arena (what a device heap's
// Zalloc does), on the fake: the CPU cost of a Zero, its driver calls included.
func BenchmarkFakeDeviceZero(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	d := f.Open(b, 0)
	p, err := cudamem.NewDeviceVMM(public(d))
	if err != nil {
		b.Fatal(err)
	}
	a, err := arena.New(arena.Options{Provider: p, Capacity: 64 << 20, PurgeDelay: -1})
	if err != nil {
		b.Fatal(err)
	}
	s, err := a.Alloc(4096, 256)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.Zero(s.Base, 4096); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := a.Free(s); err != nil {
		b.Fatal(err)
	}
	if err := a.Close(); err != nil {
		b.Fatal(err)
	}
}
