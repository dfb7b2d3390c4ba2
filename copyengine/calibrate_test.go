package copyengine

// Tests of MethodAuto's calibration and of the kernel's grid cap against the fake driver, whose
// timing model (internal/fakecuda, cost.go) the calibration measures: each test sets the costs
// of the three paths and checks that the choice follows them.

import (
	"errors"
	"math"
	"testing"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// costs sets the fake's timing model: kernel, batch call and one copy per job.
func costs(t *testing.T, f *fakecuda.Driver, kernel, batch, perCopy fakecuda.Cost, saturation int) {
	t.Helper()
	if !f.SetCost(fakecuda.CostKernel, kernel) || !f.SetCost(fakecuda.CostBatch, batch) || !f.SetCost(fakecuda.CostCopy, perCopy) ||
		!f.SetKernelSaturation(saturation) {
		t.Fatal("the fake refused the costs")
	}
	forgetCalibrations()
}

// calls counts the fake's launches, batch calls and copies.
func calls(f *fakecuda.Driver) [3]int64 { return [3]int64{f.Launches(), f.Batches(), f.Memcpys()} }

// copyBlocks copies n blocks of size bytes to the device with b and back, synchronized, and
// returns the driver calls it took.
func copyBlocks(t *testing.T, f *fakecuda.Driver, dev *cuda.Device, b *Batcher, n int, size uintptr) [3]int64 {
	t.Helper()
	host, d := hostMem(t, dev, uintptr(n)*size), devMem(t, dev, uintptr(n)*size)
	jobs := make([]Job, n)
	for i := range jobs {
		jobs[i] = mkJob(d+uintptr(i)*size, host+uintptr(i)*size, size)
	}
	before := calls(f)
	must(t, "Copy", b.Copy(jobs, 0))
	must(t, "StreamSynchronize", dev.StreamSynchronize(0)) // launches count when they run
	after := calls(f)
	return [3]int64{after[0] - before[0], after[1] - before[1], after[2] - before[2]}
}

// TestCalibrationFollowsTimings sets timings under which the kernel wins small blocks and the
// batch call wins big ones (a kernel of one block per job needs 64 blocks to fill the link),
// then the reverse, then timings under which one copy per job wins everywhere, and checks that
// MethodAuto's choices, and the calls Copy makes, follow each; bytes are checked with every
// choice.
func TestCalibrationFollowsTimings(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	s, err := dev.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", dev.StreamDestroy(s)) }()
	type want struct {
		size  uintptr
		count int
		m     Method
	}
	for _, c := range []struct {
		name                   string
		kernel, batch, perCopy fakecuda.Cost
		saturation             int
		method                 Method // Method()
		wants                  []want
	}{
		{"kernel-small-batch-big",
			fakecuda.Cost{CallNs: 4000, MBps: 52000}, fakecuda.Cost{CallNs: 2000, JobNs: 750, MBps: 50000}, fakecuda.Cost{CallNs: 2000, MBps: 50000}, 64,
			MethodAuto, []want{{4 << 10, 1024, MethodKernel}, {4 << 10, 16, MethodKernel}, {2 << 20, 4, MethodBatchAPI}, {256 << 10, 16, MethodBatchAPI}}},
		{"batch-small-kernel-big",
			fakecuda.Cost{CallNs: 50000, MBps: 52000}, fakecuda.Cost{CallNs: 1000, JobNs: 10, MBps: 5000}, fakecuda.Cost{CallNs: 1000000, MBps: 50000}, 1,
			MethodAuto, []want{{4 << 10, 16, MethodBatchAPI}, {2 << 20, 4, MethodKernel}}},
		{"per-copy-everywhere",
			fakecuda.Cost{CallNs: 100000, MBps: 52000}, fakecuda.Cost{CallNs: 100000, MBps: 50000}, fakecuda.Cost{CallNs: 10, MBps: 100000}, 1,
			MethodPerCopy, []want{{4 << 10, 1024, MethodPerCopy}, {2 << 20, 4, MethodPerCopy}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			costs(t, f, c.kernel, c.batch, c.perCopy, c.saturation)
			b := newBatcher(t, dev, Options{})
			cal, err := b.Calibration()
			must(t, "Calibration", err)
			t.Logf("%s", cal)
			if b.Method() != c.method {
				t.Errorf("Method() = %s, want %s", b.Method(), c.method)
			}
			for _, w := range c.wants {
				if got := b.Choose(int(w.size), w.count); got != w.m {
					t.Errorf("Choose(%d, %d) = %s, want %s", w.size, w.count, got, w.m)
				}
				got := copyBlocks(t, f, dev, b, w.count, w.size)
				var wc [3]int64
				switch w.m {
				case MethodKernel:
					wc = [3]int64{1, 0, 0}
				case MethodBatchAPI:
					wc = [3]int64{0, 1, 0}
				default:
					wc = [3]int64{0, 0, int64(w.count)}
				}
				if got != wc {
					t.Errorf("%d blocks of %d bytes: launches, batch calls, copies %v, want %v", w.count, w.size, got, wc)
				}
			}
			roundTrip(t, dev, b, s, 7, 600)
		})
	}
}

// TestCalibrationCached checks that the calibration is made once per device and
// configuration in a process: a second Batcher shares it and makes no driver call to time
// anything (even after the timings changed), a Batcher of another configuration calibrates
// anew, a forced method never calibrates, and a calibration that cannot get its memory leaves
// MethodAuto on the first method the driver has, saying why.
func TestCalibrationCached(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	forgetCalibrations()
	before := calls(f)
	a := newBatcher(t, dev, Options{})
	if calls(f) == before {
		t.Fatal("the first auto Batcher timed nothing")
	}
	ca, err := a.Calibration()
	must(t, "Calibration", err)
	if len(ca.Cells) != len(calSizes)*len(calCounts) || ca.Took <= 0 {
		t.Errorf("calibration: %d cells, took %v", len(ca.Cells), ca.Took)
	}
	for _, cell := range ca.Cells {
		if cell.Jobs < 1 || cell.Jobs > cell.Count || cell.Jobs*cell.Size > calBytes && cell.Jobs > 1 {
			t.Errorf("cell %+v: timed with %d jobs", cell, cell.Jobs)
		}
		for m := MethodKernel; m <= MethodPerCopy; m++ {
			if !(cell.GBps[m] > 0) || math.IsInf(cell.GBps[m], 0) {
				t.Errorf("cell %s x %d: %s at %v GB/s", sizeName(cell.Size), cell.Count, m, cell.GBps[m])
			}
		}
	}
	if a.Method() != MethodKernel { // the default timings: the kernel everywhere
		t.Errorf("default timings: Method() = %s, want kernel\n%s", a.Method(), ca)
	}
	if !f.SetCost(fakecuda.CostKernel, fakecuda.Cost{CallNs: 1e9, MBps: 1}) {
		t.Fatal("SetCost refused")
	}
	before = calls(f)
	b := newBatcher(t, dev, Options{TrustNoOverlap: true}) // the overlap check is no part of the key
	if cb, _ := b.Calibration(); cb != ca || calls(f) != before || b.Method() != MethodKernel {
		t.Errorf("a second Batcher calibrated again (calls %v -> %v) or chose %s", before, calls(f), b.Method())
	}
	other := newBatcher(t, dev, Options{BlockThreads: 128})
	if co, _ := other.Calibration(); co == ca || other.Method() == MethodKernel {
		t.Errorf("another configuration shares the calibration, or chose the kernel that now costs a second: %s", other.Method())
	}
	f.ResetCosts()
	for _, m := range []Method{MethodKernel, MethodBatchAPI, MethodPerCopy} {
		before = calls(f)
		forced := newBatcher(t, dev, Options{Method: m})
		if _, err := forced.Calibration(); !errors.Is(err, ErrNotCalibrated) || !errors.Is(err, pinmalloc.ErrNotSupported) || calls(f) != before {
			t.Errorf("forced %s: calibration %v, calls %v -> %v", m, err, before, calls(f))
		}
		if forced.Choose(4<<10, 1024) != m || forced.Method() != m {
			t.Errorf("forced %s chooses %s", m, forced.Choose(4<<10, 1024))
		}
	}

	forgetCalibrations()
	f.SetMemory(0, 2<<20) // no room for the calibration's 4 MiB of device memory
	defer f.SetMemory(0, 1<<30)
	starved := newBatcher(t, dev, Options{})
	if _, err := starved.Calibration(); !errors.Is(err, pinmalloc.ErrOutOfMemory) || !errors.Is(err, ErrNotCalibrated) || starved.Method() != MethodKernel {
		t.Errorf("calibration without memory: %v; Method() %s, want kernel", err, starved.Method())
	}
	f.SetMemory(0, 1<<30)
	again := newBatcher(t, dev, Options{})
	if _, err := again.Calibration(); err != nil {
		t.Errorf("the failed calibration was kept: %v", err)
	}
}

// TestBatcherSMShare checks the cap on the kernel's grid: no launch, the calibration's
// included, has more blocks than SMShare of the device's multiprocessors (or MaxBlocks, when
// smaller), at least one; the options' checks; and that the calibration times the kernel under
// its cap (under timings where the kernel needs 64 blocks to fill the link, a capped kernel
// loses the large batches an uncapped one wins).
func TestBatcherSMShare(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	if !f.SetSMs(40) {
		t.Fatal("SetSMs refused")
	}
	for _, c := range []struct {
		o    Options
		grid int64
	}{
		{Options{SMShare: 0.25}, 10},
		{Options{SMShare: 0.5, MaxBlocks: 4}, 4},
		{Options{SMShare: 0.25, MaxBlocks: 30}, 10},
		{Options{SMShare: 0.001}, 1},
		{Options{SMShare: 1}, 40},
		{Options{LowPriority: true}, 80},
		{Options{LowPriority: true, SMShare: 0.1}, 4},
		{Options{Method: MethodKernel, SMShare: 0.2}, 8},
	} {
		f.ResetGrids()
		forgetCalibrations()
		b := newBatcher(t, dev, c.o)
		if c.o.Method == MethodAuto && f.MaxGrid() != c.grid { // the calibration's 1024-job batches hit the cap
			t.Errorf("%+v: the calibration launched grids up to %d, want %d", c.o, f.MaxGrid(), c.grid)
		}
		if b.Choose(4<<10, 1000) != MethodKernel {
			t.Fatalf("%+v: the kernel is not chosen for 1000 blocks of 4 KiB", c.o)
		}
		copyBlocks(t, f, dev, b, 1000, 4<<10)
		if f.LastGrid() != c.grid || f.MaxGrid() != c.grid {
			t.Errorf("%+v: 1000 jobs launched with %d blocks (largest %d), want %d", c.o, f.LastGrid(), f.MaxGrid(), c.grid)
		}
		copyBlocks(t, f, dev, b, 3, 4<<10)
		if f.LastGrid() != min(3, c.grid) {
			t.Errorf("%+v: 3 jobs launched with %d blocks", c.o, f.LastGrid())
		}
	}
	for _, share := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		if _, err := New(public(dev), Options{SMShare: share}); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("SMShare %v: %v, want ErrInvalidOptions", share, err)
		}
	}

	costs(t, f, fakecuda.Cost{CallNs: 4000, MBps: 52000}, fakecuda.Cost{CallNs: 2000, JobNs: 750, MBps: 50000},
		fakecuda.Cost{CallNs: 2000, MBps: 50000}, 64)
	free := newBatcher(t, dev, Options{})
	capped := newBatcher(t, dev, Options{SMShare: 0.1}) // 4 blocks: a sixteenth of the link
	if free.Choose(4<<10, 1024) != MethodKernel || capped.Choose(4<<10, 1024) != MethodBatchAPI {
		t.Errorf("1024 blocks of 4 KiB: uncapped %s (want kernel), capped %s (want batch-api)",
			free.Choose(4<<10, 1024), capped.Choose(4<<10, 1024))
	}
}

// TestCalibrationChoice checks Choice's nearest cell on a log scale.
func TestCalibrationChoice(t *testing.T) {
	c := &Calibration{Sizes: []int{4 << 10, 64 << 10}, Counts: []int{16, 1024}, Cells: []CalibrationCell{
		{Choice: MethodKernel}, {Choice: MethodBatchAPI}, {Choice: MethodPerCopy}, {Choice: MethodKernel},
	}, sizeBound: midpoints([]float64{4 << 10, 64 << 10}), countBound: midpoints([]float64{16, 1024})}
	for _, x := range []struct {
		size  int
		count int
		want  Method
	}{
		{1, 1, MethodKernel}, {4 << 10, 16, MethodKernel}, {4 << 10, 127, MethodKernel}, {4 << 10, 129, MethodBatchAPI},
		{15 << 10, 16, MethodKernel}, {17 << 10, 16, MethodPerCopy}, {1 << 30, 1 << 20, MethodKernel}, {64 << 10, 16, MethodPerCopy},
	} {
		if got := c.Choice(x.size, x.count); got != x.want {
			t.Errorf("Choice(%d, %d) = %s, want %s", x.size, x.count, got, x.want)
		}
	}
}

// splitBatcher returns a batcher calibrated on costs that choose the batch API for small blocks
// and the kernel for big ones; the costs and calibrations are reset at the test's end.
func splitBatcher(t *testing.T, f *fakecuda.Driver, dev *cuda.Device) *Batcher {
	t.Helper()
	t.Cleanup(func() { f.ResetCosts(); forgetCalibrations() })
	costs(t, f, fakecuda.Cost{CallNs: 50000, MBps: 52000}, fakecuda.Cost{CallNs: 1000, JobNs: 10, MBps: 5000},
		fakecuda.Cost{CallNs: 1000000, MBps: 50000}, 1)
	b := newBatcher(t, dev, Options{})
	if b.Choose(4<<10, 16) != MethodBatchAPI || b.Choose(2<<20, 4) != MethodKernel {
		t.Fatalf("calibration chose %s and %s, want batch-api and kernel", b.Choose(4<<10, 16), b.Choose(2<<20, 4))
	}
	return b
}

// TestKernelAfterLegacyBatchStaysOnCallersStream checks that a kernel batch on the legacy
// stream launches there, even after a batch-API batch on it made the side stream that API's
// fence needs: only LowPriority moves the kernel to the side stream. (The launch had taken
// any side stream, paying two fences per batch for a stream of ordinary priority.)
func TestKernelAfterLegacyBatchStaysOnCallersStream(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	b := splitBatcher(t, f, dev)
	copyBlocks(t, f, dev, b, 16, 4<<10) // batch API on stream 0: through the side stream
	if b.side == 0 {
		t.Fatal("a batch-API batch on the legacy stream made no side stream")
	}
	host, d := hostMem(t, dev, 4<<20), devMem(t, dev, 4<<20)
	f.Hold(true)
	must(t, "Copy held", b.Copy([]Job{mkJob(d, host, 2<<20), mkJob(d+2<<20, host+2<<20, 2<<20)}, 0))
	if err := dev.StreamQuery(b.side); err != nil {
		t.Errorf("side stream after a held kernel batch on the legacy stream: %v, want idle (the kernel runs on stream 0)", err)
	}
	f.Complete()
	f.Hold(false)
	must(t, "StreamSynchronize", dev.StreamSynchronize(0))
}

// TestBatchOnLegacyHandle: the batch API refuses the legacy stream by either handle, 0 or
// CU_STREAM_LEGACY (1); a batch-API batch on handle 1 goes through the side stream as one on
// stream 0 does. Before, only 0 was fenced, and a batch on handle 1 failed with the driver's
// CUDA_ERROR_INVALID_VALUE (the fake took it until it refused handle 1 as the driver does).
func TestBatchOnLegacyHandle(t *testing.T) {
	f, dev := fakecuda.RunDevice(t)
	if f == nil {
		return
	}
	b := splitBatcher(t, f, dev)
	const n, size = 16, 4 << 10
	host, d := hostMem(t, dev, n*size), devMem(t, dev, n*size)
	jobs := make([]Job, n)
	for i := range jobs {
		jobs[i] = mkJob(d+uintptr(i)*size, host+uintptr(i)*size, size)
	}
	must(t, "Copy on CU_STREAM_LEGACY", b.Copy(jobs, 1))
	must(t, "StreamSynchronize(1)", dev.StreamSynchronize(1))
	if b.side == 0 {
		t.Error("a batch-API batch on CU_STREAM_LEGACY made no side stream")
	}
}
