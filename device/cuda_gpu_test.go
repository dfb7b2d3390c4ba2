package device

// Tests and benchmarks on a real GPU; each skips with "no CUDA driver" where there is none (and
// fails on any other error opening the device: fakecuda.GPU).

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCUDAStreamOrderedReuse makes the window between a free and its completion real: stream b
// is kept busy with large device-to-device copies when a block allocated on a is freed on b,
// so a must not get the block back until b has finished them. Whether b was still busy is
// asked after a's allocation, so a fast GPU cannot make the test vacuous: where b had already
// finished, the round proves nothing and is run again with twice the copies (issue 26: it used
// to skip itself there), and the test fails if no amount of work holds the stream.
func TestCUDAStreamOrderedReuse(t *testing.T) {
	dev := fakecuda.GPU(t, 0)
	h := newHeap(t, dev, Options{Capacity: 2 << 30})
	streamOrderedReuse(t, dev, h, 512<<20, 20)
}

// TestFakeStreamOrderedReuseHeld runs TestCUDAStreamOrderedReuse's body on the fake driver,
// whose held queries keep b busy until it is synchronized.
func TestFakeStreamOrderedReuseHeld(t *testing.T) {
	f, dev, h := runHeap(t, Options{Capacity: 64 << 20})
	if f == nil {
		return
	}
	f.Hold(true)
	defer f.Complete()
	streamOrderedReuse(t, dev, h, 4<<20, 2)
}

// streamOrderedReuse is the body of TestCUDAStreamOrderedReuse: copies of big bytes on b,
// starting with copies of them and doubling until b is seen busy after a's allocation.
func streamOrderedReuse(t *testing.T, dev *cuda.Device, h *Heap, big uintptr, copies int) {
	a, b := newStream(t, dev, h), newStream(t, dev, h)
	src, dst := alloc(t, h, big, b), alloc(t, h, big, b)
	var live []cuda.DevicePtr // allocated on a, freed at the end
	for ; ; copies *= 2 {
		p := alloc(t, h, 4096, a)
		for i := 0; i < copies; i++ {
			must(t, "DtoDAsync", h.DtoDAsync(pcuda.DevicePtr(dst), pcuda.DevicePtr(src), int(big), pcuda.Stream(b)))
		}
		must(t, "FreeAsync on b", h.FreeAsync(pcuda.DevicePtr(p), pcuda.Stream(b)))
		q := alloc(t, h, 4096, a)
		live = append(live, q)
		err := dev.StreamQuery(b)
		busy := errors.Is(err, pinmalloc.ErrNotReady)
		if err != nil && !busy {
			t.Fatalf("StreamQuery(b): %v", err)
		}
		if busy && q == p {
			t.Fatal("a block freed on a busy stream was reused on another stream at once")
		}
		must(t, "StreamSynchronize", dev.StreamSynchronize(b))
		if busy {
			if r := alloc(t, h, 4096, a); r != p {
				t.Errorf("after b finished the block was not reused: %#x, want %#x", r, p)
				live = append(live, r)
			} else {
				must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(r), pcuda.Stream(a)))
			}
			break
		}
		if copies >= 640 {
			t.Fatalf("b finished %d copies of %d MiB before a's next allocation: no work holds the stream", copies, big>>20)
		}
		t.Logf("b finished %d copies of %d MiB before a's allocation: again with twice as many", copies, big>>20)
	}
	for _, q := range live {
		must(t, "Free", h.Free(pcuda.DevicePtr(q)))
	}
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(src), pcuda.Stream(b)))
	must(t, "FreeAsync", h.FreeAsync(pcuda.DevicePtr(dst), pcuda.Stream(b)))
}

// TestCUDARoundTrip writes blocks of several sizes to the device and reads them back.
func TestCUDARoundTrip(t *testing.T) {
	dev := fakecuda.GPU(t, 0)
	h := newHeap(t, dev, Options{Capacity: 1 << 30})
	for _, n := range []uintptr{1, 256, 4000, 300 << 10, 3 << 20, 100 << 20} {
		src := bytes.Repeat([]byte{byte(n), 7, 42}, int(n/3)+1)[:n]
		got := make([]byte, n)
		p := alloc(t, h, n, 0)
		must(t, "HtoD", h.HtoD(pcuda.DevicePtr(p), src))
		must(t, "DtoH", h.DtoH(got, pcuda.DevicePtr(p)))
		if !bytes.Equal(got, src) {
			t.Errorf("%d bytes: the round trip changed the data", n)
		}
		must(t, "Free", h.Free(pcuda.DevicePtr(p)))
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
		p, err := h.Alloc(int(n), pcuda.Stream(s))
		if err != nil {
			return err
		}
		return h.FreeAsync(p, pcuda.Stream(s))
	})
	must(b, "ForgetStream", h.ForgetStream(pcuda.Stream(s)))
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
