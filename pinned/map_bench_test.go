package pinned

import "testing"

// BenchmarkMap is one Map of a pool of 1 GiB holding 100 000 buffers of 64 B to 1 KiB and
// ten of 3 MiB: how long allocation waits while the debug page takes its picture.
func BenchmarkMap(b *testing.B) {
	p := newTestPool(b, Options{Backend: Pageable, Capacity: 1 << 30})
	var held [][]byte
	for i := 0; i < 100000; i++ {
		buf, err := p.Alloc(64 << (i % 5))
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, buf)
	}
	for i := 0; i < 10; i++ {
		buf, err := p.Alloc(3 << 20)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, buf)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = p.Map()
	}
	b.StopTimer()
	for _, buf := range held {
		if err := p.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
}
