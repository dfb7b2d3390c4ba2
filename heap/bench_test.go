package heap

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// mixedSizes returns 1024 sizes drawn uniformly from 16 B to 8 KiB.
func mixedSizes(seed uint64) []uintptr {
	r := rand.New(rand.NewPCG(seed, 2))
	s := make([]uintptr, 1024)
	for i := range s {
		s[i] = 16 + uintptr(r.IntN(8192-16+1))
	}
	return s
}

// pairs runs b.N Alloc+free pairs over sizes (a power-of-two count).
func pairs(b *testing.B, h *Heap, sizes []uintptr, free func(uintptr) error) {
	mask := len(sizes) - 1
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := h.Alloc(sizes[i&mask])
		if err != nil {
			b.Fatal(err)
		}
		if err := free(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPairMixed is one Alloc and one Free of mixed sizes from 16 B to 8 KiB on a
// single-owner heap (compare: native mimalloc ~13-17 ns on this class of machine).
func BenchmarkPairMixed(b *testing.B) {
	h := newTestHeap(b, 1<<30, Options{})
	pairs(b, h, mixedSizes(1), h.Free)
}

// BenchmarkRemoteFreePair allocates on the owner and frees through the lock-free group path.
func BenchmarkRemoteFreePair(b *testing.B) {
	h := newTestHeap(b, 1<<30, Options{})
	pairs(b, h, mixedSizes(3), h.g.Free)
}

// BenchmarkPairSizes is one Alloc and one Free of a fixed size, from a small class through
// object pages (512 KiB, 1 MiB) to huge objects (4 and 16 MiB).
func BenchmarkPairSizes(b *testing.B) {
	for _, n := range []uintptr{64, 4 << 10, 64 << 10, 512 << 10, 1 << 20, 4 << 20, 16 << 20} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			h := newTestHeap(b, 1<<30, Options{})
			pairs(b, h, []uintptr{n}, h.Free)
		})
	}
}

// BenchmarkChurnMixed keeps 1024 live blocks and replaces a random one each step.
func BenchmarkChurnMixed(b *testing.B) {
	h := newTestHeap(b, 1<<30, Options{})
	sizes := mixedSizes(2)
	slots := make([]uintptr, 1024)
	for i := range slots {
		slots[i], _ = h.Alloc(sizes[i])
	}
	r := rand.New(rand.NewPCG(5, 5))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := r.IntN(1024)
		if err := h.Free(slots[k]); err != nil {
			b.Fatal(err)
		}
		p, err := h.Alloc(sizes[i&1023])
		if err != nil {
			b.Fatal(err)
		}
		slots[k] = p
	}
	b.StopTimer()
	for _, p := range slots {
		_ = h.Free(p)
	}
}

// BenchmarkPairRegions is BenchmarkPairMixed in the last of 1 or 32 regions: finding a block
// must not grow with the number of regions (the address table; the arena's own lookup scans
// them).
func BenchmarkPairRegions(b *testing.B) {
	for _, n := range []int{1, 32} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			h := newTestHeapOn(b, arena.Options{Provider: arena.PageableHost(arena.HostOptions{}), Capacity: 128 << 20, RegionSize: 4 << 20}, Options{})
			var hold []uintptr
			for range n - 1 { // a huge block fills each of the first regions
				p, err := h.Alloc(4 << 20)
				if err != nil {
					b.Fatal(err)
				}
				hold = append(hold, p)
			}
			if st := h.a.Stats(); st.Regions != n-1 {
				b.Fatalf("%d regions before the pairs, want %d", st.Regions, n-1)
			}
			pairs(b, h, mixedSizes(1), h.Free)
			b.StopTimer()
			for _, p := range hold {
				_ = h.Free(p)
			}
		})
	}
}

// BenchmarkChurnLive is the bench's churn case on a single-owner heap: live blocks of 64 B,
// each step frees one drawn at random (splitmix64 of the step, as bench/churn.go) and
// allocates its replacement.
func BenchmarkChurnLive(b *testing.B) {
	for _, live := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(live), func(b *testing.B) {
			h := newTestHeap(b, 1<<30, Options{})
			slots := make([]uintptr, live)
			for i := range slots {
				var err error
				if slots[i], err = h.Alloc(64); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				z := 0x636875726e5f6f70 + uint64(i)*0x9e3779b97f4a7c15
				z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
				z = (z ^ z>>27) * 0x94d049bb133111eb
				z ^= z >> 31
				k := (z >> 32) * uint64(live) >> 32
				if err := h.Free(slots[k]); err != nil {
					b.Fatal(err)
				}
				p, err := h.Alloc(64)
				if err != nil {
					b.Fatal(err)
				}
				mem.Bytes(p, 1)[0] = 1 // touch it, as the bench does
				slots[k] = p
			}
			b.StopTimer()
			for _, p := range slots {
				_ = h.Free(p)
			}
		})
	}
}

// BenchmarkProdCons is the bench's producer/consumer case on one heap: the owner allocates
// batches of 64 blocks of mixed sizes and hands them through a ring of 16 to a goroutine that
// frees them through the group (remote frees, collected by the owner).
func BenchmarkProdCons(b *testing.B) {
	h := newTestHeap(b, 1<<30, Options{})
	sizes := mixedSizes(4)
	full, empty := make(chan []uintptr, 16), make(chan []uintptr, 16)
	for range 16 {
		empty <- make([]uintptr, 64)
	}
	done := make(chan error)
	go func() {
		var first error
		for batch := range full {
			for _, p := range batch {
				if err := h.g.Free(p); err != nil && first == nil {
					first = err
				}
			}
			empty <- batch
		}
		done <- first
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		batch := <-empty
		for j := range batch {
			p, err := h.Alloc(sizes[i&1023])
			if err != nil {
				b.Fatal(err)
			}
			batch[j] = p
			i++
		}
		full <- batch
	}
	close(full)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkZallocReused is one Zalloc and one Free of a fixed size: the block is reused, so
// every Zalloc clears it (64 B: the clear's fixed cost; 4 KiB: its bytes too).
func BenchmarkZallocReused(b *testing.B) {
	for _, n := range []uintptr{64, 4 << 10} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			h := newTestHeap(b, 1<<30, Options{})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p, err := h.Zalloc(n)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Free(p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
