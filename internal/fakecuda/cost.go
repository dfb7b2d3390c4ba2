package fakecuda

// The fake's timing model (the end of fakedriver.c.in): each stream has a device clock that
// the work it runs advances by latency per call + latency per job + bytes / bandwidth, with
// one set of figures per path (CostPath), and cuEventElapsedTime returns the clock's advance
// between two event records. It is what copyengine.Batcher's calibration measures on the fake;
// tests inject figures to decide which path the calibration must choose. The defaults are H100
// figures under which the gather kernel is fastest at every block size and count (see the C
// source); Reset restores them.

// SlowEnv names the environment variable that makes the fake a slow GPU in wall time: set to a
// factor F when the library loads, every call takes 5 us times F more, every queued operation
// its modelled device time times F when it runs, and pinning 0.5 ms times F per 2 MiB. A test
// uses it to run a whole program (the GPU check) as if on a GPU F times slower than the model.
const SlowEnv = "PINMALLOC_FAKECUDA_SLOW"

// CostPath names a path of the timing model.
type CostPath int

// Paths of the timing model.
const (
	// CostCopy is cuMemcpy* (one job per call) and cuMemsetD8*.
	CostCopy CostPath = iota
	// CostBatch is cuMemcpyBatchAsync_v2 (one call, one job per copy).
	CostBatch
	// CostKernel is the gather kernel (one launch, one job per job of its array).
	CostKernel
)

// Cost is what a path costs: CallNs per call, JobNs per job, and its bandwidth in MB/s (10^6
// bytes per second; 50000 is 50 GB/s).
type Cost struct {
	CallNs, JobNs int64
	MBps          int64
}

// Controls understood by fake_cost_ctl (the CC_ constants of the C source).
const (
	cctlSetCall = 1 + iota
	cctlSetJob
	cctlSetBW
	cctlGetCall
	cctlGetJob
	cctlGetBW
	cctlSetSaturation
	cctlSetSMs
	cctlMaxGrid
	cctlLastGrid
	cctlResetGrids
	cctlReset
)

// SetCost sets the figures of one path. It returns false, changing nothing it refused, for a
// negative latency or a bandwidth that is not positive.
func (d *Driver) SetCost(p CostPath, c Cost) bool {
	if c.CallNs < 0 || c.JobNs < 0 || c.MBps <= 0 {
		return false
	}
	return d.cctl(cctlSetCall, int64(p), c.CallNs) == 0 && d.cctl(cctlSetJob, int64(p), c.JobNs) == 0 &&
		d.cctl(cctlSetBW, int64(p), c.MBps) == 0
}

// CostOf returns the figures of one path.
func (d *Driver) CostOf(p CostPath) Cost {
	return Cost{CallNs: d.cctl(cctlGetCall, int64(p), 0), JobNs: d.cctl(cctlGetJob, int64(p), 0), MBps: d.cctl(cctlGetBW, int64(p), 0)}
}

// SetKernelSaturation sets the grid (blocks) the gather kernel needs to reach its bandwidth: a
// launch of fewer blocks moves at blocks/n of it (1, the default: any grid is enough).
func (d *Driver) SetKernelSaturation(n int) bool { return d.cctl(cctlSetSaturation, int64(n), 0) == 0 }

// SetSMs sets the multiprocessor count every device reports (attribute 16; 132 by default).
func (d *Driver) SetSMs(n int) bool { return d.cctl(cctlSetSMs, int64(n), 0) == 0 }

// MaxGrid returns the largest grid (blocks) of a kernel launch since ResetGrids.
func (d *Driver) MaxGrid() int64 { return d.cctl(cctlMaxGrid, 0, 0) }

// LastGrid returns the grid (blocks) of the last kernel launch, 0 after ResetGrids.
func (d *Driver) LastGrid() int64 { return d.cctl(cctlLastGrid, 0, 0) }

// ResetGrids forgets the grids recorded.
func (d *Driver) ResetGrids() { d.cctl(cctlResetGrids, 0, 0) }

// ResetCosts restores the default timing model and forgets the grids recorded.
func (d *Driver) ResetCosts() { d.cctl(cctlReset, 0, 0) }
