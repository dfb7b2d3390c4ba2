package device

// Tests and benchmarks on a real GPU; each skips with "no CUDA driver" where there is none.

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCUDAStreamOrderedReuse makes the window between a free and its completion real: stream b
// is kept busy with large device-to-device copies when a block allocated on a is freed on b,
// so a must not get the block back until b has finished them.
func TestCUDAStreamOrderedReuse(t *testing.T) {
	dev := fakecuda.GPU(t, 0)
	h := newHeap(t, dev, Options{Capacity: 2 << 30})
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	const big = 512 << 20
	src, dst := alloc(t, h, big, b), alloc(t, h, big, b)
	p := alloc(t, h, 4096, a)
	for i := 0; i < 20; i++ { // about 20 × 0.4 ms at 2.5 TB/s: far longer than the calls below
		must(t, "DtoDAsync", h.DtoDAsync(dst, src, big, b))
	}
	must(t, "FreeAsync on b", h.FreeAsync(p, b))
	if err := dev.StreamQuery(b); err == nil {
		t.Skip("the copies finished before the check: the GPU is faster than this test assumes")
	}
	if q := alloc(t, h, 4096, a); q == p {
		t.Fatal("a block freed on a busy stream was reused on another stream at once")
	} else {
		defer func() { must(t, "Free", h.Free(q)) }()
	}
	must(t, "StreamSynchronize", dev.StreamSynchronize(b))
	if q := alloc(t, h, 4096, a); q != p {
		t.Errorf("after b finished the block was not reused: %#x, want %#x", q, p)
	} else {
		must(t, "FreeAsync", h.FreeAsync(q, a))
	}
	must(t, "FreeAsync", h.FreeAsync(src, b))
	must(t, "FreeAsync", h.FreeAsync(dst, b))
}

// TestCUDARoundTrip writes blocks of several sizes to the device and reads them back.
func TestCUDARoundTrip(t *testing.T) {
	dev := fakecuda.GPU(t, 0)
	h := newHeap(t, dev, Options{Capacity: 1 << 30})
	for _, n := range []uintptr{1, 256, 4000, 300 << 10, 3 << 20, 100 << 20} {
		src := bytes.Repeat([]byte{byte(n), 7, 42}, int(n/3)+1)[:n]
		got := make([]byte, n)
		p := alloc(t, h, n, 0)
		must(t, "HtoD", h.HtoD(p, src))
		must(t, "DtoH", h.DtoH(got, p))
		if !bytes.Equal(got, src) {
			t.Errorf("%d bytes: the round trip changed the data", n)
		}
		must(t, "Free", h.Free(p))
	}
}

// BenchmarkCUDAHeapAllocFree is an Alloc and FreeAsync pair on one stream, against the
// driver's stream-ordered pool (BenchmarkCUDAMemAllocAsync).
func BenchmarkCUDAHeapAllocFree(b *testing.B) {
	dev := fakecuda.GPU(b, 0)
	h, err := New(public(dev), Options{Capacity: 1 << 30})
	must(b, "New", err)
	s, err := dev.StreamCreate(true)
	must(b, "StreamCreate", err)
	benchPairs(b, func(n uintptr) error {
		p, err := h.Alloc(n, s)
		if err != nil {
			return err
		}
		return h.FreeAsync(p, s)
	})
	must(b, "ForgetStream", h.ForgetStream(s))
	must(b, "Close", h.Close())
	must(b, "StreamDestroy", dev.StreamDestroy(s))
}

// BenchmarkCUDAMemAllocAsync is a cuMemAllocAsync and cuMemFreeAsync pair on one stream.
func BenchmarkCUDAMemAllocAsync(b *testing.B) {
	dev := fakecuda.GPU(b, 0)
	s, err := dev.StreamCreate(true)
	must(b, "StreamCreate", err)
	benchPairs(b, func(n uintptr) error {
		p, err := dev.MemAllocAsync(n, s)
		if err != nil {
			return err
		}
		return dev.MemFreeAsync(p, s)
	})
	must(b, "StreamSynchronize", dev.StreamSynchronize(s))
	must(b, "StreamDestroy", dev.StreamDestroy(s))
}

// benchPairs runs pair, an allocation and its free, as one sub-benchmark per size.
func benchPairs(b *testing.B, pair func(n uintptr) error) {
	for _, n := range []uintptr{4 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := pair(n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
