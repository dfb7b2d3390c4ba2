package cudamem_test

// Tests of the CUDA providers on a real GPU. Each skips with "no CUDA driver" where there is
// none; on a GPU machine run the test binary with -test.run CUDA.

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cudamem"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/nvml"
)

// bestH2D returns the best bandwidth in GB/s of five copies of n bytes from host to device.
func bestH2D(t *testing.T, d *cuda.Device, dst cuda.DevicePtr, src, n uintptr) float64 {
	t.Helper()
	best := time.Duration(1<<63 - 1)
	for i := 0; i < 5; i++ {
		start := time.Now()
		must(t, "MemcpyHtoD", d.MemcpyHtoD(dst, src, n))
		best = min(best, time.Since(start))
	}
	return float64(n) / best.Seconds() / 1e9
}

// TestCUDARegisteredBandwidth copies 256 MiB to the device from pinned memory of the cuda-host
// provider (VMM host granules where the driver has them, else registered memory) and from
// pageable memory: DMA from pinned memory must be at least 3× faster (55 against 7.6 GB/s on an
// H100).
func TestCUDARegisteredBandwidth(t *testing.T) {
	d := fakecuda.GPU(t, 0)
	const n = 256 << 20
	p, err := cudamem.NewHost(public(d), cudamem.HostOptions{})
	must(t, "NewHost", err)
	a := newArena(t, p.(counted), 1<<30)
	s, err := a.Alloc(n, arena.DefaultChunkSize)
	must(t, "Alloc", err)
	defer func() { must(t, "Free", a.Free(s)) }()
	pageable, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	must(t, "mmap", err)
	defer unix.Munmap(pageable)
	for i := range pageable {
		pageable[i] = byte(i) // fault it in: measure copies, not page faults
	}
	clear(mem.Bytes(s.Base, n))
	dst, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(dst)) }()
	pinnedBW := bestH2D(t, d, dst, s.Base, n)
	pageableBW := bestH2D(t, d, dst, mem.Addr(pageable), n)
	t.Logf("H2D 256 MiB: %s %.1f GB/s, pageable %.1f GB/s (%.1f×)", p.Name(), pinnedBW, pageableBW, pinnedBW/pageableBW)
	if pinnedBW < 3*pageableBW {
		t.Errorf("%s memory copies at %.1f GB/s, less than 3× pageable (%.1f GB/s)", p.Name(), pinnedBW, pageableBW)
	}
}

// TestCUDADeviceRoundTrip writes and reads back device memory of both device providers, and
// clears it with the provider's memset.
func TestCUDADeviceRoundTrip(t *testing.T) {
	d := fakecuda.GPU(t, 0)
	providers := []func(*cuda.Device) (counted, error){
		func(d *cuda.Device) (counted, error) { return cudamem.NewDeviceMalloc(public(d)) },
	}
	if d.VMMSupported() {
		providers = append(providers, func(d *cuda.Device) (counted, error) { return cudamem.NewDeviceVMM(public(d)) })
	}
	for _, mk := range providers {
		p, err := mk(d)
		must(t, "provider", err)
		t.Run(p.Name(), func(t *testing.T) {
			a := newArena(t, p, 256<<20)
			s, err := a.Alloc(5<<20+123, arena.DefaultChunkSize)
			must(t, "Alloc", err)
			roundTrip(t, d, s.Base, s.Size)
			must(t, "Zero", a.Zero(s.Base, s.Size))
			got := make([]byte, s.Size)
			must(t, "MemcpyDtoH", d.MemcpyDtoH(mem.Addr(got), s.Base, s.Size))
			for i, b := range got {
				if b != 0 {
					t.Fatalf("byte %d is %d after Zero", i, b)
				}
			}
			must(t, "Free", a.Free(s))
		})
	}
}

// TestCUDAVMMDecommit commits 1 GiB of VMM memory and decommits it: NVML must see the device's
// used memory go up and back down.
func TestCUDAVMMDecommit(t *testing.T) {
	d := fakecuda.GPU(t, 0)
	if !d.VMMSupported() {
		t.Skip(cuda.Lacks(cuda.CapVMM, "device attribute 102 is 0"))
	}
	lib := nvml.Default()
	if _, err := nvml.MemoryUsed(lib, d.Ordinal()); errors.Is(err, nvml.ErrUnavailable) {
		t.Skip(cuda.Lacks(cuda.CapNVML, err.Error()))
	}
	used := func() uint64 {
		u, err := nvml.MemoryUsed(lib, d.Ordinal())
		if err != nil {
			t.Fatalf("NVML, which answered before: %v", err)
		}
		return u
	}
	p, err := cudamem.NewDeviceVMM(public(d))
	must(t, "NewDeviceVMM", err)
	a := newArena(t, p, 4<<30)
	before := used()
	s, err := a.Alloc(1<<30, arena.DefaultChunkSize)
	must(t, "Alloc", err)
	committed := used()
	must(t, "Free", a.Free(s))
	a.Trim()
	after := used()
	t.Logf("NVML used: %d MiB before, %d MiB committed, %d MiB after Trim", before>>20, committed>>20, after>>20)
	if committed < before+900<<20 {
		t.Errorf("committing 1 GiB raised used memory by %d MiB only", (committed-before)>>20)
	}
	if after > before+100<<20 {
		t.Errorf("decommitting left used memory %d MiB above where it started", (after-before)>>20)
	}
}

// TestCUDAMultiGPU makes one arena per device, each sized by its own free memory, and checks
// that each allocation is memory of its own device.
func TestCUDAMultiGPU(t *testing.T) {
	fakecuda.GPU(t, 0) // skips without a driver
	n, err := cuda.Count()
	must(t, "Count", err)
	for i := 0; i < n; i++ {
		d := fakecuda.GPU(t, i)
		p, err := cudamem.NewDevice(public(d))
		must(t, "NewDevice", err)
		a := newArena(t, p.(counted), 0)
		free, _, err := d.MemGetInfo()
		must(t, "MemGetInfo", err)
		if a.Capacity() > free {
			t.Errorf("device %d: arena capacity %d above the %d bytes free", i, a.Capacity(), free)
		}
		s, err := a.Alloc(64<<20, arena.DefaultChunkSize)
		must(t, "Alloc", err)
		if after, _, err := d.MemGetInfo(); err != nil || free-after < 64<<20 {
			t.Errorf("device %d: free memory went from %d to %d (%v)", i, free, after, err)
		}
		roundTrip(t, d, s.Base, 1<<20)
		must(t, "Free", a.Free(s))
	}
}

// BenchmarkCUDAHostCommit commits (and pins) 256 MiB of host memory and releases it, per
// pinned host provider: VMM host granules (create + map + set access per 2 MiB), mmap + populate
// + cuMemHostRegister, and mmap + mlock (the Locked backend, no driver) for reference. ms/GiB is
// the commit's cost per GiB (arena Stats' CommitPerGiB); the release is not timed.
func BenchmarkCUDAHostCommit(b *testing.B) {
	d := fakecuda.GPU(b, 0)
	pub := public(d)
	const n = 256 << 20
	providers := []struct {
		name string
		make func() (arena.Provider, error)
	}{
		{"cuda-host-vmm", func() (arena.Provider, error) { return cudamem.NewHostVMM(pub, cudamem.HostOptions{}) }},
		{"cuda-host-register", func() (arena.Provider, error) {
			return cudamem.NewHostRegister(pub, cudamem.HostOptions{})
		}},
		{"mmap-mlock", func() (arena.Provider, error) { return arena.LockedHost(arena.HostOptions{}), nil }},
	}
	for _, pr := range providers {
		b.Run(pr.name, func(b *testing.B) {
			var commit time.Duration
			var bytes uint64
			for i := 0; i < b.N; i++ {
				p, err := pr.make()
				if err != nil {
					b.Skipf("%s: %v", pr.name, err)
				}
				a, err := arena.New(arena.Options{Provider: p, Capacity: 1 << 30, PurgeDelay: -1})
				if err != nil {
					b.Fatal(err)
				}
				s, err := a.Alloc(n, arena.DefaultChunkSize)
				if err != nil {
					b.Skipf("%s: %v", pr.name, err) // mlock of 256 MiB needs the memlock limit raised
				}
				st := a.Stats()
				commit += st.CommitTime
				bytes += st.CommitBytes
				if err := a.Free(s); err != nil {
					b.Fatal(err)
				}
				if err := a.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(commit.Seconds()*1000*float64(1<<30)/float64(bytes), "ms/GiB")
		})
	}
}

// TestCUDAParallelPin pins 1 GiB of VMM host memory (or registered memory, where the driver
// has no VMM host memory) with Precommit at 1, 2, 4 and 8 commit workers on the real driver,
// logs the cost per GiB and the node it went to, and checks that a 256 MiB span of it copies
// in one call: the figures the bench's -commit suite reports, at test scale, for the GPU check.
func TestCUDAParallelPin(t *testing.T) {
	d := fakecuda.GPU(t, 0)
	if n, src, ok := cudamem.DeviceNode(public(d)); ok {
		t.Logf("device 0 is nearest NUMA node %d (%s)", n, src)
	}
	for _, w := range []int{1, 2, 4, 8} {
		p, err := cudamem.NewHost(public(d), cudamem.HostOptions{})
		must(t, "NewHost", err)
		a, err := arena.New(arena.Options{Provider: p, Capacity: 1 << 30, PurgeDelay: -1, CommitWorkers: w})
		must(t, "arena.New", err)
		start := time.Now()
		n, err := a.Precommit(1 << 30)
		took := time.Since(start)
		must(t, "Precommit", err)
		s, err := a.Alloc(256<<20, arena.DefaultChunkSize)
		must(t, "Alloc", err)
		dst, err := d.MemAlloc(s.Size)
		must(t, "MemAlloc", err)
		must(t, "MemcpyHtoD of the span in one call", d.MemcpyHtoD(dst, s.Base, s.Size))
		must(t, "MemFree", d.MemFree(dst))
		must(t, "Free", a.Free(s))
		start = time.Now()
		a.Trim()
		unpin := time.Since(start)
		st := a.Stats()
		t.Logf("%s, %d workers: pinned %d MiB in %v (%.1f ms/GiB), unpinned in %v; node %d",
			p.Name(), w, n>>20, took, float64(took.Microseconds())/1e3*float64(1<<30)/float64(n), unpin, st.Node)
		must(t, "Close", a.Close())
		if c := p.(counted).Counters(); c.Live() != 0 {
			t.Errorf("after Close: %+v", c)
		}
	}
}
