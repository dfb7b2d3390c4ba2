package pinned_test

// Benchmarks of the CUDAHost backend on a real GPU; each skips with "no CUDA driver" where
// there is none. Run on a GPU machine with -test.run '^$' -test.bench CUDA.

import (
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// cudaPool makes a pool of CUDA pinned host memory on device 0, or skips.
func cudaPool(b *testing.B) (*pinned.Pool, *cuda.Device) {
	dev := fakecuda.GPU(b, 0)
	p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 4 << 30, Align: 256})
	if err != nil {
		b.Fatalf("New(CUDAHost): %v", err)
	}
	b.Cleanup(func() {
		if err := p.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	})
	return p, dev
}

var allocSizes = []int{4 << 10, 64 << 10, 512 << 10, 1 << 20, 4 << 20}

// BenchmarkCUDAPoolAllocFree is an Alloc and Free pair of the pool, whose memory is registered
// with the driver once and then reused; compare BenchmarkCUDAHostAllocFree.
func BenchmarkCUDAPoolAllocFree(b *testing.B) {
	p, _ := cudaPool(b)
	poolPairsOf(b, p)
}

// BenchmarkFakeCUDAPoolAllocFree is BenchmarkCUDAPoolAllocFree against the fake driver, on any
// machine: the pool's own cost (its memory is VMM host granules, so requests above the class
// pages take the packed shard's slow path).
func BenchmarkFakeCUDAPoolAllocFree(b *testing.B) {
	if p := fakeCUDAPool(b); p != nil {
		poolPairsOf(b, p)
	}
}

// fakeCUDAPool returns a CUDAHost pool on the fake driver, closed when b ends, in the child
// process fakecuda.RunBenchmark runs b in; nil in the parent, which reports the child's figures.
func fakeCUDAPool(b *testing.B) *pinned.Pool {
	if fakecuda.RunBenchmark(b) == nil {
		return nil
	}
	p, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 4 << 30, Align: 256})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	return p
}

// poolPairsOf runs an Alloc and Free pair of p for each of allocSizes.
func poolPairsOf(b *testing.B, p *pinned.Pool) {
	for _, n := range allocSizes {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				buf, err := p.Alloc(n)
				if err == nil {
					err = p.Free(buf)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCUDAHostAllocFree is a cuMemHostAlloc and cuMemFreeHost pair per call: what the pool
// replaces (about 1.2 ms on an H100).
func BenchmarkCUDAHostAllocFree(b *testing.B) {
	dev := fakecuda.GPU(b, 0)
	for _, n := range allocSizes {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h, err := dev.MemHostAlloc(uintptr(n), cuda.HostAllocPortable)
				if err == nil {
					err = dev.MemFreeHost(h)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCUDACopy measures host-to-device and device-to-host bandwidth (b.SetBytes: MB/s is
// the rate) from a pool buffer of each size and from a cuMemHostAlloc buffer, at 1, 16, 64 and
// 256 MiB, the two side by side for each size and direction.
func BenchmarkCUDACopy(b *testing.B) {
	p, dev := cudaPool(b)
	const most = 256 << 20
	d, err := dev.MemAlloc(most)
	if err != nil {
		b.Fatal(err)
	}
	defer dev.MemFree(d)
	ha, err := dev.MemHostAlloc(most, cuda.HostAllocPortable)
	if err != nil {
		b.Fatal(err)
	}
	defer dev.MemFreeHost(ha)
	clear(mem.Bytes(ha, most))
	for _, n := range []uintptr{1 << 20, 16 << 20, 64 << 20, 256 << 20} {
		pool, err := p.Alloc(int(n))
		if err != nil {
			b.Fatal(err)
		}
		clear(pool)
		for _, dir := range []string{"H2D", "D2H"} {
			for _, src := range []struct {
				name string
				addr uintptr
			}{{"pool", mem.Addr(pool)}, {"hostalloc", ha}} {
				b.Run(fmt.Sprintf("%s/%dMiB/%s", dir, n>>20, src.name), func(b *testing.B) {
					b.SetBytes(int64(n))
					for i := 0; i < b.N; i++ {
						var err error
						if dir == "H2D" {
							err = dev.MemcpyHtoD(d, src.addr, n)
						} else {
							err = dev.MemcpyDtoH(src.addr, d, n)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		if err := p.Free(pool); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFakeCUDAPoolPairParallel runs BenchmarkFakeCUDAPoolAllocFree's pairs on every P at
// once (compare -cpu 1 and -cpu 2): requests above 64 KiB go to the pool's big shard when it
// is free and to their P's home shard when another goroutine holds it, so that they do not
// queue on one lock.
func BenchmarkFakeCUDAPoolPairParallel(b *testing.B) {
	p := fakeCUDAPool(b)
	if p == nil {
		return
	}
	for _, n := range allocSizes {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					buf, err := p.Alloc(n)
					if err == nil {
						err = p.Free(buf)
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
