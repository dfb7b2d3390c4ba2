package cuda_test

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// BenchmarkFakeCalls is the CPU cost of a Device's ways into its context, on the fake driver:
// Do of an empty function (the push and pop alone), StreamQuery (push, query and pop in one
// cgo call) and MemGetInfo (a Do of one driver call). The parallel forms make the calls from
// every P at once on one Device, where whatever a call writes in the Device is shared: Do's
// push and pop take no lock in the fake, so Do/parallel shows that cost alone; the other two
// also meet the fake's mutex.
func BenchmarkFakeCalls(b *testing.B) {
	f := fakecuda.RunBenchmark(b)
	if f == nil {
		return
	}
	d := f.Open(b, 0)
	s, err := d.StreamCreate(true)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := d.StreamDestroy(s); err != nil {
			b.Error(err)
		}
	}()
	nop := func() error { return nil }
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Do", func() error { return d.Do(nop) }},
		{"StreamQuery", func() error { return d.StreamQuery(s) }},
		{"MemGetInfo", func() error { _, _, err := d.MemGetInfo(); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.call(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := c.call(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
