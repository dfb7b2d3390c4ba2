package ipcpool

// Tests on a real GPU. Each skips with "no CUDA driver" where there is none; on a GPU machine
// run the test binary with -test.run CUDA.

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
)

// TestCUDAPool runs a pool on the real driver, with memfd regions each process registers and
// with exportable VMM host granules each process imports: the owner's 64 MiB buffer goes to
// the device and back into an attached process's buffer, by DMA, and another process (a
// child) reads it by handle, every byte intact.
func TestCUDAPool(t *testing.T) {
	d := fakecuda.GPU(t, 0)
	for _, vmm := range []bool{false, true} {
		t.Run(fmt.Sprintf("vmm=%v", vmm), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "pool.sock")
			w, err := Serve(path, Options{Size: 256 << 20, Pool: cudaHost, VMM: vmm})
			must(t, "Serve", err)
			defer w.Close()
			p, err := Attach(context.Background(), path, AttachOptions{Pool: cudaHost})
			must(t, "Attach", err)
			const n = 64 << 20
			src, err := w.Alloc(n)
			must(t, "owner Alloc", err)
			fill(src, 7)
			dst, err := p.Alloc(n)
			must(t, "Alloc", err)
			dev, err := d.MemAlloc(n)
			must(t, "MemAlloc", err)
			best := func(f func() error) float64 {
				b := time.Duration(1<<63 - 1)
				for range 5 {
					start := time.Now()
					must(t, "copy", f())
					b = min(b, time.Since(start))
				}
				return float64(n) / b.Seconds() / 1e9
			}
			h2d := best(func() error { return d.MemcpyHtoD(dev, mem.Addr(src), n) })
			d2h := best(func() error { return d.MemcpyDtoH(mem.Addr(dst), dev, n) })
			must(t, "verify", verify(dst, 7))
			t.Logf("vmm=%v: owner's buffer to the device %.1f GB/s, back into an attached process's %.1f GB/s", vmm, h2d, d2h)
			if h2d < 20 || d2h < 20 {
				t.Errorf("copies at %.1f / %.1f GB/s: not DMA from pinned memory", h2d, d2h)
			}
			h, err := p.Handle(dst)
			must(t, "Handle", err)
			k := startChild(t, path, childDevEnv+"=1", childQuietEnv+"=1")
			if got := k.do(t, "C %s 7", fmtHandle(h)); got != "OK" {
				t.Fatalf("another process reads the buffer by handle: %s", got)
			}
			k.quit(t)
			must(t, "MemFree", d.MemFree(dev))
			must(t, "Free", p.Free(dst))
			must(t, "Close", p.Close())
			must(t, "owner Free", w.Free(src))
			waitFor(t, func() bool { return w.Attached() == 0 })
			must(t, "owner Close", w.Close())
		})
	}
}
