package copyengine

// Tests of the Batcher against the fake driver, which runs the gather kernel's semantics in C
// and checks that every range it touches is device-accessible.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc"
	pcuda "github.com/pinmalloc/pinmalloc/cuda"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
	"github.com/pinmalloc/pinmalloc/internal/mem"
	"github.com/pinmalloc/pinmalloc/internal/pattern"
	"github.com/pinmalloc/pinmalloc/internal/probe"
)

// public is d, a device opened through the binding (fakecuda), as the public API takes it.
func public(d *cuda.Device) *pcuda.Device { return cuda.Wrap[*pcuda.Device](d) }

// mkJob is a Job of n bytes between the raw addresses the internal binding deals in.
func mkJob[D, S, N ~uintptr | ~int](dst D, src S, n N) Job {
	return Job{Dst: pcuda.DevicePtr(dst), Src: pcuda.DevicePtr(src), Len: int(n)}
}

func must(t testing.TB, what string, err error) {
	t.Helper()
	probe.Pause()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// newBatcher makes a Batcher closed at cleanup.
func newBatcher(t testing.TB, dev *cuda.Device, o Options) *Batcher {
	t.Helper()
	b, err := New(public(dev), o)
	must(t, "New", err)
	t.Cleanup(func() { must(t, "Batcher.Close", b.Close()) })
	return b
}

// hostMem allocates n bytes of pinned host memory mapped for the device and returns the device
// address (equal to the host address under unified addressing).
func hostMem(t testing.TB, dev *cuda.Device, n uintptr) uintptr {
	t.Helper()
	h, err := dev.MemHostAlloc(n, cuda.HostAllocDeviceMap|cuda.HostAllocPortable)
	must(t, "MemHostAlloc", err)
	d, err := dev.MemHostGetDevicePointer(h)
	must(t, "MemHostGetDevicePointer", err)
	if d != h {
		t.Fatalf("device pointer %#x of host memory %#x: unified addressing expected", d, h)
	}
	t.Cleanup(func() { must(t, "MemFreeHost", dev.MemFreeHost(h)) })
	return h
}

// pageableMem returns n bytes of pageable memory, unmapped at cleanup: memory no kernel
// reaches (the fake's devices answer PAGEABLE_MEMORY_ACCESS 0), where cuMemHostAlloc memory,
// mapped for every device whatever its flags (unified addressing), is reached.
func pageableMem(t testing.TB, n int) uintptr {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, "mmap", err)
	t.Cleanup(func() { must(t, "munmap", unix.Munmap(b)) })
	return mem.Addr(b)
}

// devMem allocates n bytes of device memory.
func devMem(t testing.TB, dev *cuda.Device, n uintptr) cuda.DevicePtr {
	t.Helper()
	p, err := dev.MemAlloc(n)
	must(t, "MemAlloc", err)
	t.Cleanup(func() { must(t, "MemFree", dev.MemFree(p)) })
	return p
}

// fill fills b with pseudo-random bytes of seed (eight at a time: ChaCha8's Read was a third
// of TestBatcherRoundTrip's CPU).
func fill(b []byte, seed uint64) {
	pattern.Random(b, &seed)
}

// scatter lays out blocks of the given sizes in a region of that many bytes in a random order,
// each at a random alignment class (16-byte aligned mostly, sometimes off by a few bytes, which
// the kernel moves byte by byte), and returns the offsets and the region's size.
func scatter(rng *rand.Rand, sizes []uintptr) (offs []uintptr, total uintptr) {
	order := rng.Perm(len(sizes))
	offs = make([]uintptr, len(sizes))
	for _, i := range order {
		skew := uintptr(0)
		if rng.IntN(8) == 0 {
			skew = uintptr(1 + rng.IntN(15))
		}
		offs[i] = total + skew
		total += skew + sizes[i] + uintptr(rng.IntN(4))*256 // gaps between blocks
	}
	return offs, total
}

// blockSizes returns n sizes from 4 KiB to 1 MiB, log-uniform but with large blocks rare
// (so that the test stays small), some of them not a multiple of 16.
func blockSizes(rng *rand.Rand, n int) []uintptr {
	sizes := make([]uintptr, n)
	for i := range sizes {
		shift := 12 + rng.IntN(3) // 4 KiB .. 16 KiB
		if rng.IntN(16) == 0 {
			shift = 15 + rng.IntN(3) // 32 KiB .. 128 KiB
		} else if rng.IntN(128) == 0 {
			shift = 18 + rng.IntN(3) // 256 KiB .. 1 MiB
		}
		sizes[i] = 1 << shift
		if rng.IntN(6) == 0 {
			sizes[i] -= uintptr(1 + rng.IntN(15))
		}
	}
	return sizes
}

// roundTrip moves n scattered blocks from pinned host memory to device memory and back to
// other places in host memory with b on stream s, and checks every byte.
func roundTrip(t testing.TB, dev *cuda.Device, b *Batcher, s cuda.Stream, seed uint64, n int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	sizes := blockSizes(rng, n)
	inOff, inTotal := scatter(rng, sizes)
	devOff, devTotal := scatter(rng, sizes)
	outOff, outTotal := scatter(rng, sizes)
	in, out, d := hostMem(t, dev, inTotal), hostMem(t, dev, outTotal), devMem(t, dev, devTotal)
	src := mem.Bytes(in, inTotal)
	fill(src, seed)
	clear(mem.Bytes(out, outTotal))
	up, down := make([]Job, n), make([]Job, n)
	for i, sz := range sizes {
		up[i] = mkJob(d+devOff[i], in+inOff[i], sz)
		down[i] = mkJob(out+outOff[i], d+devOff[i], sz)
	}
	must(t, "Copy host→device", b.Copy(up, pcuda.Stream(s)))
	must(t, "Copy device→host", b.Copy(down, pcuda.Stream(s)))
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	dst := mem.Bytes(out, outTotal)
	for i, sz := range sizes {
		if !bytes.Equal(dst[outOff[i]:outOff[i]+sz], src[inOff[i]:inOff[i]+sz]) {
			t.Fatalf("%s: block %d (%d bytes) changed on its round trip", b.Method(), i, sz)
		}
	}
}

// TestBatcherRoundTrip moves thousands of scattered 4 KiB – 1 MiB blocks host → device → host
// with every method and checks every byte, and that each method made the driver calls it
// should: one launch or one batch call per batch, or one copy per block.
func TestBatcherRoundTrip(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(s)) }()
	const n = 2500
	for i, m := range []Method{MethodKernel, MethodBatchAPI, MethodPerCopy, MethodAuto} {
		t.Run(m.String(), func(t *testing.T) {
			b := newBatcher(t, dev, Options{Method: m})
			want := m
			if m == MethodAuto {
				want = MethodKernel
			}
			if b.Method() != want {
				t.Fatalf("Method = %s, want %s", b.Method(), want)
			}
			launches, batches, copies := f.Launches(), f.Batches(), f.Memcpys()
			roundTrip(t, dev, b, s, uint64(i), n)
			launches, batches, copies = f.Launches()-launches, f.Batches()-batches, f.Memcpys()-copies
			var wl, wb, wc int64
			switch want {
			case MethodKernel:
				wl = 2
			case MethodBatchAPI:
				wb = 2
			case MethodPerCopy:
				wc = 2 * n
			}
			if launches != wl || batches != wb || copies != wc {
				t.Errorf("driver calls: %d launches, %d batches, %d copies; want %d, %d, %d", launches, batches, copies, wl, wb, wc)
			}
		})
	}
}

// TestBatcherOptions covers the low-priority stream with a bounded grid, the legacy stream, and
// the option checks.
func TestBatcherOptions(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, o := range []Options{
		{Method: MethodPerCopy + 1}, {MaxBlocks: -1}, {BlockThreads: 100}, {BlockThreads: 2048},
	} {
		if _, err := New(public(dev), o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
	if _, err := New(nil, Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New(nil) = %v", err)
	}

	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(s)) }()
	low := newBatcher(t, dev, Options{LowPriority: true, MaxBlocks: 8, BlockThreads: 128})
	if low.side == 0 || low.blocks != 8 || low.threads != 128 {
		t.Fatalf("low-priority batcher: side %#x, %d blocks of %d threads", low.side, low.blocks, low.threads)
	}
	roundTrip(t, dev, low, s, 10, 500)
	dflt := newBatcher(t, dev, Options{LowPriority: true})
	if dflt.blocks <= 0 {
		t.Errorf("LowPriority without MaxBlocks: grid bound %d", dflt.blocks)
	}

	// The low-priority launch is fenced both ways: with completion held, the caller's stream
	// has the launch's fence pending behind it, and completing the caller's stream alone does
	// not complete the side stream.
	host, d := hostMem(t, dev, 1<<20), devMem(t, dev, 1<<20)
	f.Hold(true)
	must(t, "Copy held", low.Copy([]Job{mkJob(d, host, 4096)}, pcuda.Stream(s)))
	if err := dev.StreamQuery(s); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("caller's stream after a held low-priority copy: %v, want not ready", err)
	}
	if err := dev.StreamQuery(low.side); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("side stream after a held copy: %v, want not ready", err)
	}
	f.Complete()
	f.Hold(false)

	// The legacy stream: the kernel launches on it; the batch API is fenced through a side
	// stream, since the driver refuses stream 0 for it.
	for _, m := range []Method{MethodKernel, MethodBatchAPI, MethodPerCopy} {
		b := newBatcher(t, dev, Options{Method: m})
		roundTrip(t, dev, b, 0, 20+uint64(m), 200)
	}
}

// TestBatcherAuto checks the fallback order of MethodAuto and the refusal of a forced method
// the driver cannot do.
func TestBatcherAuto(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	f.FailModuleLoad(1, fakecuda.ResultInvalidPTX)
	if _, err := New(public(dev), Options{Method: MethodKernel}); !errors.Is(err, ErrMethodUnsupported) {
		t.Errorf("forced kernel with the PTX refused: %v", err)
	}
	f.FailModuleLoad(1, fakecuda.ResultInvalidPTX)
	b := newBatcher(t, dev, Options{})
	if b.Method() != MethodBatchAPI {
		t.Errorf("auto with the PTX refused: %s, want batch-api", b.Method())
	}
	if f.Modules() != 0 {
		t.Errorf("%d modules loaded after refusals", f.Modules())
	}
	for m, want := range map[Method]string{MethodAuto: "auto", MethodKernel: "kernel", MethodBatchAPI: "batch-api",
		MethodPerCopy: "per-copy", 9: "Method(9)"} {
		if m.String() != want {
			t.Errorf("%d.String() = %q", m, m.String())
		}
	}
	if got := gatherTarget(9, 0); got != 75 {
		t.Errorf("target for 9.0: sm_%d", got)
	}
	if got := gatherTarget(7, 0); got != 70 {
		t.Errorf("target for 7.0: sm_%d", got)
	}
	if got := gatherTarget(3, 5); got != 0 {
		t.Errorf("target for 3.5: sm_%d", got)
	}
}

// TestBatcherBadJobs checks that invalid and overlapping batches are refused before anything
// moves, that an empty batch is a no-op, and Close: every Copy after it fails with ErrClosed,
// an empty one too (it returned nil).
func TestBatcherBadJobs(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	host, d := hostMem(t, dev, 1<<20), devMem(t, dev, 1<<20)
	for _, m := range []Method{MethodKernel, MethodBatchAPI, MethodPerCopy} {
		b := newBatcher(t, dev, Options{Method: m})
		calls := func() int64 { return f.Launches() + f.Batches() + f.Memcpys() }
		before := calls()
		must(t, "empty Copy", b.Copy(nil, 0))
		for _, c := range []struct {
			name string
			jobs []Job
			want error
		}{
			{"zero length", []Job{mkJob(d, host, 0)}, ErrInvalidJob},
			{"negative length", []Job{mkJob(d, host, -8)}, ErrInvalidJob},
			{"zero destination", []Job{mkJob(0, host, 8)}, ErrInvalidJob},
			{"zero source", []Job{mkJob(d, 0, 8)}, ErrInvalidJob},
			{"wrapping", []Job{mkJob(^uintptr(0)-4, host, 8)}, ErrInvalidJob},
			{"destinations overlap", []Job{mkJob(d, host, 4096), mkJob(d+4095, host+8192, 16)}, ErrOverlap},
			{"destination overlaps a source", []Job{mkJob(d, host, 4096), mkJob(host+4000, d+8192, 16)}, ErrOverlap},
			{"a job overlapping itself", []Job{mkJob(d+16, d, 4096)}, ErrOverlap},
			{"same destination twice", []Job{mkJob(d, host, 64), mkJob(d, host+64, 64)}, ErrOverlap},
		} {
			if err := b.Copy(c.jobs, 0); !errors.Is(err, c.want) {
				t.Errorf("%s: %s: %v, want %v", m, c.name, err, c.want)
			}
		}
		// Sources may overlap, and adjacent ranges do not overlap.
		must(t, "sources shared", b.Copy([]Job{mkJob(d, host, 4096), mkJob(d+4096, host, 4096)}, 0))
		must(t, "StreamSynchronize", dev.StreamSynchronize(0)) // Launches counts kernels run
		if calls() == before {
			t.Errorf("%s: the valid batch made no driver call", m)
		}
		must(t, "Close", b.Close())
		must(t, "second Close", b.Close())
		trusting := newBatcher(t, dev, Options{Method: m, TrustNoOverlap: true})
		if err := trusting.Copy([]Job{mkJob(d, host, 64), mkJob(d, host+64, 64)}, 0); err != nil {
			t.Errorf("%s: TrustNoOverlap refused overlapping jobs: %v", m, err)
		}
		if err := trusting.Copy([]Job{mkJob(d, host, 0)}, 0); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%s: TrustNoOverlap accepted a zero-length job: %v", m, err)
		}
		for _, jobs := range [][]Job{{mkJob(d, host, 8)}, nil, {}} {
			if err := b.Copy(jobs, 0); !errors.Is(err, ErrClosed) || !errors.Is(err, pinmalloc.ErrClosed) {
				t.Errorf("%s: Copy of %d jobs after Close: %v, want ErrClosed", m, len(jobs), err)
			}
		}
	}
}

// TestBatcherFaults checks that driver failures surface (wrapped, with the driver's result)
// and leave the destination untouched, and that the Batcher works again after a transient one.
func TestBatcherFaults(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	host, d := hostMem(t, dev, 1<<20), devMem(t, dev, 1<<20)
	unmapped := pageableMem(t, 1<<16) // no kernel reaches it
	src := mem.Bytes(host, 4096)
	for i := range src {
		src[i] = byte(i + 1)
	}
	ok := []Job{mkJob(d, host, 4096)}
	back := []Job{mkJob(host+8192, d, 4096)}

	kb := newBatcher(t, dev, Options{Method: MethodKernel})
	f.FailLaunch(1, fakecuda.ResultLaunchFailed)
	var r cuda.Result
	if err := kb.Copy(ok, 0); !errors.As(err, &r) || r != fakecuda.ResultLaunchFailed {
		t.Errorf("failed launch: %v", err)
	}
	must(t, "Copy back", kb.Copy(back, 0))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0)) // the copies are queued until then
	if bytes.Equal(mem.Bytes(host+8192, 4096), src) {
		t.Error("a failed launch moved the bytes")
	}
	must(t, "Copy after a failed launch", kb.Copy(ok, 0))
	must(t, "Copy back", kb.Copy(back, 0))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0))
	if !bytes.Equal(mem.Bytes(host+8192, 4096), src) {
		t.Error("the copy after a failed launch did not move the bytes")
	}
	// A source the device cannot reach faults the kernel when it runs: the launch succeeds,
	// the synchronizing call reports the fault, and it is sticky, like a real context.
	must(t, "Copy of a job that faults", kb.Copy([]Job{mkJob(d, unmapped, 64)}, 0))
	err := dev.StreamSynchronize(0)
	if !errors.As(err, &r) || r != fakecuda.ResultIllegalAddress || f.StickyError() != fakecuda.ResultIllegalAddress {
		t.Errorf("kernel fault: %v (sticky %d)", err, f.StickyError())
	}
	if err := kb.Copy(ok, 0); !errors.As(err, &r) || r != fakecuda.ResultIllegalAddress {
		t.Errorf("Copy after a fault: %v, want the sticky error", err)
	}
	f.ClearStickyError()

	// The copy-engine methods refuse a range past the end of an allocation.
	for _, m := range []Method{MethodBatchAPI, MethodPerCopy} {
		b := newBatcher(t, dev, Options{Method: m})
		err := b.Copy([]Job{mkJob(host+64<<10, d, 64), mkJob(host, d+1<<20-8, 64)}, 0)
		if !errors.Is(err, pinmalloc.ErrInvalidValue) {
			t.Errorf("%s: copy past the end: %v", m, err)
		}
	}
}

// TestBatcherStaging keeps every launch pending (Hold) so that the staging ring fills: the
// Batcher allocates up to maxStages buffers, then waits for the oldest, and grows a buffer too
// small for a batch.
func TestBatcherStaging(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	b := newBatcher(t, dev, Options{Method: MethodKernel})
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(s)) }()
	host, d := hostMem(t, dev, 8<<20), devMem(t, dev, 8<<20)
	f.Hold(true)
	for i := 0; i < 2*maxStages; i++ {
		must(t, "Copy", b.Copy([]Job{mkJob(d+uintptr(i)*4096, host+uintptr(i)*4096, 4096)}, pcuda.Stream(s)))
		if len(b.stages) > maxStages {
			t.Fatalf("%d staging buffers", len(b.stages))
		}
	}
	if len(b.stages) != maxStages {
		t.Errorf("%d staging buffers after %d held launches, want %d", len(b.stages), 2*maxStages, maxStages)
	}
	f.Complete()
	f.Hold(false)
	big := make([]Job, 2*minStageJobs+1)
	for i := range big {
		big[i] = mkJob(d+uintptr(i)*1024, host+uintptr(i)*1024, 1024)
	}
	must(t, "Copy of a big batch", b.Copy(big, pcuda.Stream(s)))
	if last := b.stages[len(b.stages)-1]; last.jobs < len(big) {
		t.Errorf("staging buffer of %d jobs for a batch of %d", last.jobs, len(big))
	}
	must(t, "StreamSynchronize", dev.StreamSynchronize(s))
	if !bytes.Equal(mem.Bytes(d, uintptr(len(big))*1024), mem.Bytes(host, uintptr(len(big))*1024)) {
		t.Error("the big batch did not move the bytes")
	}
}

// TestBatcherConcurrent copies from several goroutines, each on its own stream, through one
// Batcher per method (run it with -race).
func TestBatcherConcurrent(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	for _, m := range []Method{MethodKernel, MethodBatchAPI, MethodPerCopy} {
		b := newBatcher(t, dev, Options{Method: m, LowPriority: m == MethodKernel})
		const workers, rounds, blocks = 4, 8, 64
		var wg sync.WaitGroup
		errs := make(chan error, 2*workers)
		for w := 0; w < workers; w++ {
			s, err := dev.StreamCreate(true)
			must(t, "StreamCreate", err)
			host, d := hostMem(t, dev, 2*blocks*4096), devMem(t, dev, blocks*4096)
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				defer func() { errs <- dev.StreamDestroy(s) }()
				rng := rand.New(rand.NewPCG(uint64(w), 2))
				in, out := mem.Bytes(host, blocks*4096), mem.Bytes(host+blocks*4096, blocks*4096)
				up, down := make([]Job, blocks), make([]Job, blocks)
				for r := 0; r < rounds; r++ {
					fill(in, uint64(w*rounds+r))
					perm := rng.Perm(blocks)
					for i, p := range perm {
						up[i] = mkJob(d+uintptr(p)*4096, host+uintptr(i)*4096, 4096)
						down[i] = mkJob(host+blocks*4096+uintptr(i)*4096, d+uintptr(p)*4096, 4096)
					}
					if err := b.Copy(up, pcuda.Stream(s)); err != nil {
						errs <- err
						return
					}
					if err := b.Copy(down, pcuda.Stream(s)); err != nil {
						errs <- err
						return
					}
					if err := dev.StreamSynchronize(s); err != nil {
						errs <- err
						return
					}
					if !bytes.Equal(in, out) {
						errs <- fmt.Errorf("%s: worker %d round %d: bytes changed", m, w, r)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	}
}
