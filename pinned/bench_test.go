package pinned

import (
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkPoolPair is one Alloc and one Free of mixed sizes from 16 B to 8 KiB through the
// goroutine-safe pool.
func BenchmarkPoolPair(b *testing.B) { poolPairs(b, Options{}) }

// poolPairs times Alloc+Free pairs of mixed sizes from 16 B to 8 KiB in a pool made with o.
func poolPairs(b *testing.B, o Options) { pairsOf(b, newTestPool(b, o), sizes1k(1)) }

// pairsOf times Alloc+Free pairs in p, of the sizes of sz in turn (len(sz) a power of two).
func pairsOf(b *testing.B, p *Pool, sz []int) {
	// One untimed pass makes a page of every class first: a page's tables are Go memory, made
	// once, which spread over a short run's b.N read as 1 B/op (issue 29).
	for _, n := range sz {
		buf, err := p.Alloc(n)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
	mask := len(sz) - 1
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf, err := p.Alloc(sz[i&mask])
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoolPairSizes is one Alloc and one Free of a fixed size through the pool: class
// blocks (4 and 64 KiB), object pages (512 KiB and 1 MiB) and a huge object (4 MiB). The
// pool's memory is pageable: the figures are the allocator's, not the memlock limit's.
func BenchmarkPoolPairSizes(b *testing.B) {
	for _, n := range []int{4 << 10, 64 << 10, 512 << 10, 1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			p := newTestPool(b, Options{Backend: Pageable})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				buf, err := p.Alloc(n)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Free(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPoolPairParallel runs BenchmarkPoolPair's loop on every P: compare -cpu 1 and
// -cpu 2 for the throughput scaling (and BenchmarkControlCPU for what the machine can give).
func BenchmarkPoolPairParallel(b *testing.B) {
	p := newTestPool(b, Options{})
	var seed atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		sz := sizes1k(seed.Add(1))
		for i := 0; pb.Next(); i++ {
			buf, err := p.Alloc(sz[i&1023])
			if err != nil {
				b.Error(err)
				return
			}
			if err := p.Free(buf); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

var controlSink atomic.Uint64

// BenchmarkControlCPU is pure arithmetic on every P: its -cpu 1 / -cpu 2 ratio is the best
// scaling the machine offers at the moment of the run (shared VMs often offer less than 2×).
func BenchmarkControlCPU(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		x := uint64(1)
		for pb.Next() {
			for j := range 20 {
				x = x*31 + uint64(j)
			}
		}
		controlSink.Add(x)
	})
}

// BenchmarkPairVsSyncPool times an Alloc+Free pair of one size through the pool and, in the
// same run, a Get+Put through what a Go program uses instead: a sync.Pool per power-of-two
// capacity holding *[]byte (as bench's go-syncpool). Compare pool/N with syncpool/N.
func BenchmarkPairVsSyncPool(b *testing.B) {
	for _, n := range []int{16, 64, 4096} {
		b.Run(fmt.Sprintf("pool/%dB", n), func(b *testing.B) {
			pairsOf(b, newTestPool(b, Options{Backend: Pageable}), []int{n})
		})
		b.Run(fmt.Sprintf("syncpool/%dB", n), func(b *testing.B) {
			var pools [64]sync.Pool
			k := bits.Len(uint(n - 1))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var buf *[]byte
				if v := pools[k].Get(); v != nil {
					buf = v.(*[]byte)
					*buf = (*buf)[:n]
				} else {
					s := make([]byte, n, 1<<k)
					buf = &s
				}
				pools[bits.Len(uint(cap(*buf)-1))].Put(buf)
			}
		})
	}
}
