package copyengine

// Tests and benchmarks of the Batcher on a real GPU; each skips with "no CUDA driver" where
// there is none. Run on a GPU machine with
//
//	copyengine.test -test.v -test.run CUDABatcher -test.bench CUDABatcher -test.benchtime 20x

import (
	pcuda "github.com/pinmalloc/pinmalloc/cuda"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// TestCUDABatcher loads the kernel (logging the JIT time: about 114 ms the first time on an
// H100, far less from the driver's cache, and the calibration's table) and moves thousands of
// scattered blocks host → device → host with every method the driver has, bytes checked; then
// again with the kernel on a low-priority stream with a bounded grid.
func TestCUDABatcher(t *testing.T) {
	dev := fakecuda.GPU(t, 0)
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(s)) }()
	start := time.Now()
	auto := newBatcher(t, dev, Options{})
	t.Logf("New: %s in %v (calibration included)", auto.Method(), time.Since(start))
	if !auto.kernel {
		t.Errorf("the driver refused the kernel: auto has %s", auto.Method())
	}
	if cal, err := auto.Calibration(); err != nil {
		t.Errorf("no calibration: %v", err)
	} else {
		t.Logf("%s", cal)
	}
	for i, o := range []Options{
		{Method: MethodKernel}, {Method: MethodBatchAPI}, {Method: MethodPerCopy},
		{Method: MethodKernel, LowPriority: true}, {Method: MethodKernel, MaxBlocks: 3, BlockThreads: 64},
	} {
		b, err := New(public(dev), o)
		if err != nil {
			t.Logf("%+v: %v", o, err)
			continue
		}
		roundTrip(t, dev, b, s, uint64(100+i), 4000)
		roundTrip(t, dev, b, 0, uint64(200+i), 300) // the legacy stream
		must(t, "Close", b.Close())
	}
}

// spinPTX is a compute-bound kernel for the interference benchmark: each thread runs iters
// dependent FMAs and stores the result.
const spinPTX = `.version 7.0
.target sm_75
.address_size 64

.visible .entry pinmalloc_spin(
	.param .u64 pinmalloc_spin_out,
	.param .u64 pinmalloc_spin_iters
)
{
	.reg .pred	%p<2>;
	.reg .f32	%f<3>;
	.reg .b32	%r<5>;
	.reg .b64	%rd<6>;

	ld.param.u64	%rd1, [pinmalloc_spin_out];
	ld.param.u64	%rd2, [pinmalloc_spin_iters];
	cvta.to.global.u64	%rd1, %rd1;
	mov.u32	%r1, %tid.x;
	cvt.rn.f32.u32	%f1, %r1;
	mov.f32	%f2, 0f3F800000;
	mov.u64	%rd3, 0;
$LOOP:
	setp.ge.u64	%p1, %rd3, %rd2;
	@%p1 bra	$END;
	fma.rn.f32	%f1, %f1, 0f3F7FFFF0, %f2;
	add.u64	%rd3, %rd3, 1;
	bra	$LOOP;
$END:
	mov.u32	%r2, %ctaid.x;
	mov.u32	%r3, %ntid.x;
	mad.lo.u32	%r4, %r2, %r3, %r1;
	mul.wide.u32	%rd4, %r4, 4;
	add.u64	%rd5, %rd1, %rd4;
	st.global.f32	[%rd5], %f1;
	ret;
}
`

// BenchmarkCUDABatcherInterference measures how much the copy kernel slows a compute kernel
// running beside it (the copy engines do not run on the SMs; the kernel does). The compute
// kernel runs on a stream of the device's greatest priority, alone and then while 4 KiB blocks
// move device → host in 16 MiB batches on a stream of the least priority (which is also the
// default priority on current GPUs): the copy kernel with one block per job, the copy kernel on
// the Batcher's own low-priority stream with a bounded grid (2 blocks per SM), and the batch
// API. It reports the compute kernel's time and its slow-down against the run
// alone, and the copy rate achieved meanwhile.
func BenchmarkCUDABatcherInterference(b *testing.B) {
	dev := fakecuda.GPU(b, 0)
	least, greatest, err := dev.StreamPriorityRange()
	must(b, "StreamPriorityRange", err)
	hi, err := dev.StreamCreateWithPriority(true, greatest)
	must(b, "StreamCreateWithPriority", err)
	cp, err := dev.StreamCreateWithPriority(true, least)
	must(b, "StreamCreateWithPriority", err)
	b.Cleanup(func() {
		must(b, "StreamDestroy", dev.StreamDestroy(hi))
		must(b, "StreamDestroy", dev.StreamDestroy(cp))
	})
	mod, err := dev.ModuleLoadData(spinPTX)
	must(b, "ModuleLoadData", err)
	b.Cleanup(func() { must(b, "ModuleUnload", dev.ModuleUnload(mod)) })
	spin, err := dev.ModuleGetFunction(mod, "pinmalloc_spin")
	must(b, "ModuleGetFunction", err)
	sms, err := dev.Attribute(cuda.AttrMultiprocessorCount)
	must(b, "Attribute", err)
	grid := cuda.Dim3{X: uint32(8 * sms), Y: 1, Z: 1}
	out := devMem(b, dev, uintptr(grid.X)*256*4)
	host, d := hostMem(b, dev, 2*benchBatchBytes), devMem(b, dev, 2*benchBatchBytes)
	jobs := benchJobs(host, d, 4<<10, true)
	t0, t1, c0, c1 := benchEvent(b, dev), benchEvent(b, dev), benchEvent(b, dev), benchEvent(b, dev)
	const iters = 1 << 20 // a few ms of dependent FMAs with every SM full

	// computeTime runs the compute kernel on hi, with batches queued on cp first by queue (if
	// not nil), and returns the kernel's time and the copies' rate.
	computeTime := func(b *testing.B, queue func() (int, error)) (ms float64, gbps float64) {
		must(b, "EventRecord", dev.EventRecord(c0, cp))
		n := 0
		if queue != nil {
			var err error
			n, err = queue()
			must(b, "queue copies", err)
		}
		must(b, "EventRecord", dev.EventRecord(c1, cp))
		must(b, "EventRecord", dev.EventRecord(t0, hi))
		must(b, "LaunchKernel", dev.LaunchKernel(spin, grid, cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, hi, uint64(out), iters))
		must(b, "EventRecord", dev.EventRecord(t1, hi))
		must(b, "StreamSynchronize", dev.StreamSynchronize(hi))
		must(b, "StreamSynchronize", dev.StreamSynchronize(cp))
		k, err := dev.EventElapsed(t0, t1)
		must(b, "EventElapsed", err)
		c, err := dev.EventElapsed(c0, c1)
		must(b, "EventElapsed", err)
		if n > 0 && c > 0 {
			gbps = float64(n) * benchBatchBytes / (float64(c) * 1e6)
		}
		return float64(k), gbps
	}
	computeTime(b, nil) // warm up
	alone, _ := computeTime(b, nil)
	b.Logf("compute kernel alone: %.3f ms", alone)
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"kernel", Options{Method: MethodKernel, TrustNoOverlap: true}},
		{"kernel-lowpriority", Options{Method: MethodKernel, TrustNoOverlap: true, LowPriority: true}},
		{"batch-api", Options{Method: MethodBatchAPI, TrustNoOverlap: true}},
	} {
		bt, err := New(public(dev), c.o)
		if err != nil {
			b.Logf("%s: %v", c.name, err)
			continue
		}
		b.Run(c.name, func(b *testing.B) {
			var ms, gbps float64
			for i := 0; i < b.N; i++ {
				m, g := computeTime(b, func() (int, error) {
					const batches = 32 // 512 MiB of copies: about 10 ms, longer than the compute kernel
					for j := 0; j < batches; j++ {
						if err := bt.Copy(jobs, pcuda.Stream(cp)); err != nil {
							return j, err
						}
					}
					return batches, nil
				})
				ms += m
				gbps += g
			}
			ms /= float64(b.N)
			b.ReportMetric(ms, "compute-ms")
			b.ReportMetric(ms/alone, "slowdown")
			b.ReportMetric(gbps/float64(b.N), "copy-GB/s")
		})
		must(b, "Close", bt.Close())
	}
}

// benchEvent creates an event with timing, destroyed at cleanup.
func benchEvent(b *testing.B, dev *cuda.Device) cuda.Event {
	ev, err := dev.EventCreate(false)
	must(b, "EventCreate", err)
	b.Cleanup(func() { must(b, "EventDestroy", dev.EventDestroy(ev)) })
	return ev
}
