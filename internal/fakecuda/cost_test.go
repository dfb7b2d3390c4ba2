package fakecuda

import (
	"errors"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// TestFakeCostModel checks the timing model: cuEventElapsedTime between two records on a
// stream is what the work between them costs, by path (one copy, one batch call, one kernel
// launch, whose bandwidth scales with its grid under a saturation), with the default figures
// and with injected ones; a wait carries the waited stream's clock; an event whose record has
// not run is not ready; the device reports the model's multiprocessors; launches' grids are
// recorded.
func TestFakeCostModel(t *testing.T) {
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const n = 1 << 20
	dev, err := d.MemAlloc(2 * n)
	must(t, "MemAlloc", err)
	host, err := d.MemHostAlloc(2*n, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc", err)
	jobs, err := d.MemHostAlloc(4096, cuda.HostAllocDeviceMap)
	must(t, "MemHostAlloc jobs", err)
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	s2, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	e0, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	e1, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() {
		must(t, "MemFree", d.MemFree(dev))
		must(t, "MemFreeHost", d.MemFreeHost(host))
		must(t, "MemFreeHost", d.MemFreeHost(jobs))
		must(t, "StreamDestroy", d.StreamDestroy(s))
		must(t, "StreamDestroy", d.StreamDestroy(s2))
		must(t, "EventDestroy", d.EventDestroy(e0))
		must(t, "EventDestroy", d.EventDestroy(e1))
	}()
	m, err := d.ModuleLoadData(gatherPTX)
	must(t, "ModuleLoadData", err)
	defer func() { must(t, "ModuleUnload", d.ModuleUnload(m)) }()
	fn, err := d.ModuleGetFunction(m, "pinmalloc_gather")
	must(t, "ModuleGetFunction", err)

	// timed returns the ns that queue costs on s, between two records.
	timed := func(what string, queue func() error) float64 {
		t.Helper()
		must(t, what+": record", d.EventRecord(e0, s))
		must(t, what, queue())
		must(t, what+": record", d.EventRecord(e1, s))
		must(t, what+": synchronize", d.EventSynchronize(e1))
		ms, err := d.EventElapsed(e0, e1)
		must(t, what+": elapsed", err)
		return float64(ms) * 1e6
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-4*want+1 {
			t.Errorf("%s: %.1f ns, want %.1f", what, got, want)
		}
	}
	copyOne := func() error { return d.MemcpyHtoDAsync(dev, host, n, s) }
	batch := func() error {
		return d.MemcpyBatchAsync([]uintptr{dev, dev + n/2, dev + n}, []uintptr{host, host + n/2, host + n}, []uintptr{n / 2, n / 2, n}, 0, s)
	}
	launch := func(grid uint32) func() error {
		return func() error {
			jobArray(jobs, [3]uint64{uint64(dev), uint64(host), n / 2}, [3]uint64{uint64(dev + n), uint64(host + n), n})
			return d.LaunchKernel(fn, cuda.Dim3{X: grid, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}, 0, s, uint64(jobs), 2)
		}
	}

	// The defaults: COPY 2 us + 50 GB/s, BATCH 2 us + 0.75 us a copy + 50 GB/s, KERNEL 4 us +
	// 52 GB/s whatever the grid.
	near("one 1 MiB copy", timed("copy", copyOne), 2000+n*1000.0/50000)
	near("a batch of 3 copies, 2 MiB", timed("batch", batch), 2000+3*750+2*n*1000.0/50000)
	near("a kernel of 2 jobs, 1.5 MiB, grid 1", timed("kernel", launch(1)), 4000+1.5*n*1000/52000)
	if c := f.CostOf(CostBatch); c != (Cost{CallNs: 2000, JobNs: 750, MBps: 50000}) {
		t.Errorf("default batch cost %+v", c)
	}

	// Injected figures, and the kernel's saturation: a grid of 2 where 8 blocks are needed
	// moves at a quarter of the bandwidth.
	if !f.SetCost(CostCopy, Cost{CallNs: 100, MBps: 1000}) || !f.SetCost(CostKernel, Cost{CallNs: 10, JobNs: 5, MBps: 8000}) ||
		!f.SetKernelSaturation(8) {
		t.Fatal("setting costs refused")
	}
	if f.SetCost(CostBatch, Cost{MBps: 0}) || f.SetCost(CostBatch, Cost{CallNs: -1, MBps: 1}) || f.SetKernelSaturation(0) || f.SetSMs(0) {
		t.Error("bad costs accepted")
	}
	near("injected copy", timed("copy", copyOne), 100+n*1000.0/1000)
	near("kernel, grid 2 of 8", timed("kernel", launch(2)), 10+2*5+1.5*n*1000/(8000*2.0/8))
	near("kernel, grid 16 of 8", timed("kernel", launch(16)), 10+2*5+1.5*n*1000/8000)
	if f.MaxGrid() != 16 || f.LastGrid() != 16 {
		t.Errorf("grids recorded: max %d, last %d", f.MaxGrid(), f.LastGrid())
	}
	must(t, "launch", launch(3)())
	if f.MaxGrid() != 16 || f.LastGrid() != 3 {
		t.Errorf("grids recorded: max %d, last %d", f.MaxGrid(), f.LastGrid())
	}
	f.ResetGrids()
	if f.MaxGrid() != 0 || f.LastGrid() != 0 {
		t.Errorf("grids after reset: max %d, last %d", f.MaxGrid(), f.LastGrid())
	}

	// A wait takes the waited stream's clock: s2's copy finishes after s's.
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	ev, err := d.EventCreate(false)
	must(t, "EventCreate", err)
	defer func() { must(t, "EventDestroy", d.EventDestroy(ev)) }()
	must(t, "record", d.EventRecord(e0, s2))
	for range 3 {
		must(t, "copy", copyOne())
	}
	must(t, "record", d.EventRecord(ev, s))
	must(t, "wait", d.StreamWaitEvent(s2, ev))
	must(t, "copy on s2", d.MemcpyHtoDAsync(dev+n, host+n, n, s2))
	must(t, "record", d.EventRecord(e1, s2))
	must(t, "StreamSynchronize", d.StreamSynchronize(s2))
	ms, err := d.EventElapsed(e0, e1)
	must(t, "elapsed", err)
	if got, least := float64(ms)*1e6, 4*(100+n*1000.0/1000); got < least*(1-1e-4) {
		t.Errorf("a copy after waiting for 3 copies on another stream: %.1f ns, want at least %.1f", got, least)
	}

	// A record that has not run is not ready; a record that ran again replaces the stamp.
	f.Hold(true)
	must(t, "record", d.EventRecord(e0, s))
	must(t, "copy", copyOne())
	must(t, "record", d.EventRecord(e1, s))
	if _, err := d.EventElapsed(e0, e1); !errors.Is(err, pinmalloc.ErrNotReady) {
		t.Errorf("elapsed before the records ran: %v, want not ready", err)
	}
	f.Hold(false)
	must(t, "EventSynchronize", d.EventSynchronize(e1))
	ms, err = d.EventElapsed(e0, e1)
	must(t, "elapsed", err)
	near("re-recorded events", float64(ms)*1e6, 100+n*1000.0/1000)

	// Multiprocessors, and the defaults back.
	if v, err := d.Attribute(cuda.AttrMultiprocessorCount); err != nil || v != 132 {
		t.Errorf("multiprocessors %d, %v; want 132", v, err)
	}
	if !f.SetSMs(8) {
		t.Fatal("SetSMs refused")
	}
	if v, _ := d.Attribute(cuda.AttrMultiprocessorCount); v != 8 {
		t.Errorf("multiprocessors %d after SetSMs(8)", v)
	}
	f.ResetCosts()
	near("one 1 MiB copy after ResetCosts", timed("copy", copyOne), 2000+n*1000.0/50000)
	if v, _ := d.Attribute(cuda.AttrMultiprocessorCount); v != 132 {
		t.Errorf("multiprocessors %d after ResetCosts", v)
	}
}

// TestSlowMode: with PINMALLOC_FAKECUDA_SLOW=F the fake is a slow GPU in wall time: a queued
// copy takes its modelled device time times F when it runs (16 MiB at the model's 50 GB/s is
// 0.34 ms: 34 ms at F = 100), and pinning 2 MiB with cuMemHostAlloc takes 0.5 ms times F.
func TestSlowMode(t *testing.T) {
	const factor = 100
	if os.Getenv(childEnv) == "" {
		t.Setenv(SlowEnv, strconv.Itoa(factor))
	}
	f, d := RunDevice(t)
	if f == nil {
		return
	}
	const n = 16 << 20
	host, err := d.MemHostAlloc(n, 0)
	must(t, "MemHostAlloc", err)
	defer func() { must(t, "MemFreeHost", d.MemFreeHost(host)) }()
	dev, err := d.MemAlloc(n)
	must(t, "MemAlloc", err)
	defer func() { must(t, "MemFree", d.MemFree(dev)) }()
	s, err := d.StreamCreate(true)
	must(t, "StreamCreate", err)
	defer func() { must(t, "StreamDestroy", d.StreamDestroy(s)) }()
	t0 := time.Now()
	must(t, "HtoDAsync", d.MemcpyHtoDAsync(dev, host, n, s))
	must(t, "StreamSynchronize", d.StreamSynchronize(s))
	modelled := time.Duration(float64(n) / 50e9 * 1e9 * factor)
	if took := time.Since(t0); took < modelled {
		t.Errorf("a 16 MiB copy took %v at slow factor %d, want at least %v", took, factor, modelled)
	}
	t0 = time.Now()
	p, err := d.MemHostAlloc(2<<20, 0)
	must(t, "MemHostAlloc", err)
	if took := time.Since(t0); took < 500*time.Microsecond*factor {
		t.Errorf("pinning 2 MiB took %v at slow factor %d, want at least %v", took, factor, 500*time.Microsecond*factor)
	}
	must(t, "MemFreeHost", d.MemFreeHost(p))
}
