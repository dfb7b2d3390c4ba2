package pinned_test

// Tests of pinned CUDA host memory on a real GPU: issue 8's failure (every buffer over 2 MiB or
// crossing a 2 MiB boundary refused by the driver's copies) must not come back, on VMM host
// memory nor on the registration fallback. Each test skips with "no CUDA driver" where there is
// none; on a GPU machine run the test binary with -test.run CUDA.

import (
	"bytes"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/heap"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/pattern"
	"github.com/pinmalloc/pinmalloc/pinned"
)

// mixedSizes returns 72 sizes from 1 B to 2^log2max bytes (256 MiB on a GPU, less on the fake,
// whose copies are slow), spread geometrically, a third of them odd.
func mixedSizes(log2max int) []int {
	var s []int
	for i := 0; i < 72; i++ {
		n := int(math.Pow(2, float64(i*log2max)/71))
		if i%3 == 1 && n > 8 {
			n -= 7
		}
		s = append(s, n)
	}
	return s
}

// copyAll fills each buffer, copies it whole to the device and back (sync, then async on a
// stream), and checks the bytes; it fails the test naming every buffer the driver refused.
func copyAll(t *testing.T, d *cuda.Device, bufs [][]byte) {
	t.Helper()
	most := 0
	for _, b := range bufs {
		most = max(most, len(b))
	}
	dst, err := d.MemAlloc(uintptr(most))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.MemFree(dst) }()
	s, err := d.StreamCreate(true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.StreamDestroy(s) }()
	refused := 0
	scratch := make([]byte, most) // the bytes each buffer must hold: one Go buffer for them all
	for i, b := range bufs {
		pattern.Fill(b, 256, func(j int) byte { return byte(i*31 + j*7) })
		want := scratch[:len(b)]
		copy(want, b)
		addr, n := mem.Addr(b), uintptr(len(b))
		for _, async := range []bool{false, true} {
			var err error
			if async {
				// The host buffer may change only once the copy has read it: pinned
				// copies are truly asynchronous.
				if err = d.MemcpyHtoDAsync(dst, addr, n, s); err == nil {
					if err = d.StreamSynchronize(s); err == nil {
						clear(b)
						if err = d.MemcpyDtoHAsync(addr, dst, n, s); err == nil {
							err = d.StreamSynchronize(s)
						}
					}
				}
			} else if err = d.MemcpyHtoD(dst, addr, n); err == nil {
				clear(b)
				err = d.MemcpyDtoH(addr, dst, n)
			}
			if err != nil {
				refused++
				t.Errorf("buffer %d (%d bytes at %#x, async %v): %v", i, n, addr, async, err)
				copy(b, want)
				continue
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("buffer %d (%d bytes, async %v): bytes differ after the round trip", i, n, async)
			}
		}
	}
	if refused > 0 {
		t.Errorf("%d of %d copies refused", refused, 2*len(bufs))
	}
}

// TestCUDAPoolCopiesMixedSizes is issue 8's measurement: 72 buffers of mixed sizes (1 B to
// 256 MiB), all live at once in a CUDAHost pool, each copied whole both ways.
func TestCUDAPoolCopiesMixedSizes(t *testing.T) { poolCopiesMixedSizes(t, fakecuda.GPU(t, 0), 28) }

// TestFakePoolCopiesMixedSizes is TestCUDAPoolCopiesMixedSizes on the fake driver.
func TestFakePoolCopiesMixedSizes(t *testing.T) {
	if f := fakecuda.Run(t); f != nil {
		poolCopiesMixedSizes(t, openDevice(t), fakeLog2Max())
	}
}

// fakeLog2Max is the log2 of the largest mixed size copied on the fake: 8 MiB, four chunks and
// granules (bigger blocks take the same paths; their bytes cost the short form seconds of page
// faults), and 32 MiB in the long form (pinned.LongRun).
func fakeLog2Max() int {
	if pinned.LongRun() {
		return 25
	}
	return 23
}

// openDevice opens device 0 of the fake, closed at the end of the test.
func openDevice(t *testing.T) *cuda.Device {
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func poolCopiesMixedSizes(t *testing.T, d *cuda.Device, log2max int) {
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 2 << 30})
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("provider %s", p.Stats().Provider)
	var bufs [][]byte
	for _, n := range mixedSizes(log2max) {
		b, err := p.Alloc(n)
		if err != nil {
			t.Fatalf("Alloc(%d): %v", n, err)
		}
		bufs = append(bufs, b)
	}
	copyAll(t, d, bufs)
	for _, b := range bufs {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCUDAHostProvidersCopy runs the same buffers through a heap over each pinned host
// provider by name (VMM host granules, and the registration fallback in which every block lies
// inside one registration), and times the commit of the largest block on each.
func TestCUDAHostProvidersCopy(t *testing.T) { hostProvidersCopy(t, fakecuda.GPU(t, 0), 28) }

// TestFakeHostProvidersCopy is TestCUDAHostProvidersCopy on the fake driver.
func TestFakeHostProvidersCopy(t *testing.T) {
	if f := fakecuda.Run(t); f != nil {
		hostProvidersCopy(t, openDevice(t), fakeLog2Max())
	}
}

func hostProvidersCopy(t *testing.T, d *cuda.Device, log2max int) {
	pub := public(d)
	for _, name := range []string{"vmm", "register"} {
		t.Run(name, func(t *testing.T) {
			var prov arena.Provider
			var err error
			if name == "vmm" {
				prov, err = cudamem.NewHostVMM(pub, cudamem.HostOptions{})
			} else {
				prov, err = cudamem.NewHostRegister(pub, cudamem.HostOptions{})
			}
			if err != nil {
				t.Fatalf("the %s provider does not open: %v", name, err)
			}
			a, err := arena.New(arena.Options{Provider: prov, Capacity: 2 << 30})
			if err != nil {
				t.Fatal(err)
			}
			h, err := heap.New(a, heap.Options{})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			big, err := h.Alloc(1 << log2max)
			if err != nil {
				t.Fatal(err)
			}
			commit := time.Since(start)
			if err := h.Free(big); err != nil {
				t.Fatal(err)
			}
			var bufs [][]byte
			var ptrs []uintptr
			for _, n := range mixedSizes(log2max) {
				q, err := h.Alloc(uintptr(n))
				if err != nil {
					t.Fatalf("Alloc(%d): %v", n, err)
				}
				ptrs = append(ptrs, q)
				bufs = append(bufs, mem.Bytes(q, uintptr(n)))
			}
			copyAll(t, d, bufs)
			for _, q := range ptrs {
				if err := h.Free(q); err != nil {
					t.Fatal(err)
				}
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			t.Logf("provider %s: first %d MiB block (commit, map or register) %v, %.3f ms per 2 MiB",
				prov.Name(), 1<<log2max>>20, commit, float64(commit.Microseconds())/1000/float64(int(1)<<log2max>>21))
		})
	}
}

// TestCUDAPoolLendsCopies copies small buffers whose pages the big shard lent (a CUDAHost pool
// of several shards, after a large buffer made the big shard): each page's room lies in the
// big shard's chunks, committed there, and every buffer must still copy whole both ways, on
// VMM host memory or the registration fallback.
func TestCUDAPoolLendsCopies(t *testing.T) { poolLendsCopies(t, fakecuda.GPU(t, 0)) }

// TestFakePoolLendsCopies is TestCUDAPoolLendsCopies on the fake driver, with and without VMM
// host memory.
func TestFakePoolLendsCopies(t *testing.T) {
	f := fakecuda.Run(t)
	if f == nil {
		return
	}
	d := openDevice(t)
	for _, vmm := range []bool{true, false} {
		f.SetHostVMM(vmm)
		poolLendsCopies(t, d)
	}
}

func poolLendsCopies(t *testing.T, d *cuda.Device) {
	p := newPool(t, pinned.Options{Backend: pinned.CUDAHost, Capacity: 1 << 30, Shards: max(2, runtime.GOMAXPROCS(0))})
	defer func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	}()
	large, err := p.Alloc(1 << 20) // makes the big shard, the lender
	if err != nil {
		t.Fatal(err)
	}
	bufs := [][]byte{large}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range 4 { // on several Ps, so that several shards borrow
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 24 {
				b, err := p.Alloc(1 + (g*24+i)*(64<<10)/96) // 1 B - 64 KiB: class pages
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				bufs = append(bufs, b)
				mu.Unlock()
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	shared := 0
	for _, b := range bufs[1:] {
		if mem.Addr(b)>>21 == mem.Addr(large)>>21 {
			shared++
		}
	}
	t.Logf("provider %s: %d of %d small buffers in the large buffer's chunk", p.Stats().Provider, shared, len(bufs)-1)
	if shared == 0 {
		t.Error("no small buffer in the big shard's chunk: nothing was lent")
	}
	copyAll(t, d, bufs)
	for _, b := range bufs {
		if err := p.Free(b); err != nil {
			t.Fatal(err)
		}
	}
}
