package pinned

import (
	"math/rand/v2"
	"sync"
	"testing"
)

func newTestPool(t testing.TB, o Options) *Pool {
	t.Helper()
	if o.Capacity == 0 {
		o.Capacity = 1 << 30
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func sizes1k(seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 7))
	s := make([]int, 1024)
	for i := range s {
		s[i] = 16 + r.IntN(8192-16+1)
	}
	return s
}

func BenchmarkPoolPair(b *testing.B) {
	p := newTestPool(b, Options{})
	sz := sizes1k(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf, err := p.Alloc(sz[i&1023])
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPoolPairParallel(b *testing.B) {
	p := newTestPool(b, Options{})
	b.ReportAllocs()
	var seed sync.Mutex
	n := uint64(0)
	b.RunParallel(func(pb *testing.PB) {
		seed.Lock()
		n++
		sz := sizes1k(n)
		seed.Unlock()
		i := 0
		for pb.Next() {
			buf, err := p.Alloc(sz[i&1023])
			if err != nil {
				b.Error(err)
				return
			}
			if err := p.Free(buf); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
