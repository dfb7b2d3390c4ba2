package fakecuda

// Controls and counters of the fake's streams-copies-kernels section (the end of
// fakedriver.c.in): cuMemcpyAsync, cuMemcpyBatchAsync_v2, modules and the gather kernel.

// Controls understood by fake_kernel_ctl (the KC_ constants of the C source).
const (
	kctlFailLoad = 1 + iota
	kctlFailLaunch
	kctlSticky
	kctlClearSticky
	kctlLaunches
	kctlBatches
	kctlMemcpys
	kctlJobs
	kctlModules
	kctlSkipData
)

// Result codes the fake's kernel section returns.
const (
	// ResultIllegalAddress is CUDA_ERROR_ILLEGAL_ADDRESS: a kernel touched memory the device
	// cannot reach. It is sticky.
	ResultIllegalAddress = 700
	// ResultLaunchFailed is CUDA_ERROR_LAUNCH_FAILED, for FailLaunch.
	ResultLaunchFailed = 719
	// ResultInvalidPTX is CUDA_ERROR_INVALID_PTX, for FailModuleLoad.
	ResultInvalidPTX = 218
)

// FailModuleLoad makes the next n calls of cuModuleLoadData fail with the given result code.
func (d *Driver) FailModuleLoad(n, code int) { d.kctl(kctlFailLoad, int64(n), int64(code)) }

// FailLaunch makes the next n calls of cuLaunchKernel that pass their argument checks fail with
// the given result code, without running the kernel.
func (d *Driver) FailLaunch(n, code int) { d.kctl(kctlFailLaunch, int64(n), int64(code)) }

// StickyError returns a sticky error (a fault of queued work, ResultIllegalAddress) of any
// device's context, the lowest device's first, or 0 when no context has faulted.
func (d *Driver) StickyError() int { return int(d.kctl(kctlSticky, -1, 0)) }

// StickyErrorOf returns device dev's context's sticky error, or 0 (-1 for a device out of
// range): a fault is its context's alone, and another device's context goes on working.
func (d *Driver) StickyErrorOf(dev int) int { return int(d.kctl(kctlSticky, int64(dev), 0)) }

// ClearStickyError forgets the sticky errors of every context, which a real driver never does:
// for tests that go on after provoking a fault.
func (d *Driver) ClearStickyError() { d.kctl(kctlClearSticky, 0, 0) }

// Launches returns the number of kernels run to completion (a launch is counted when its
// stream's work runs, not at the call).
func (d *Driver) Launches() int64 { return d.kctl(kctlLaunches, 0, 0) }

// Batches returns the number of cuMemcpyBatchAsync_v2 calls that passed their checks and queued
// their copies.
func (d *Driver) Batches() int64 { return d.kctl(kctlBatches, 0, 0) }

// Memcpys returns the number of cuMemcpyAsync calls that passed their checks and queued a copy.
func (d *Driver) Memcpys() int64 { return d.kctl(kctlMemcpys, 0, 0) }

// GatherJobs returns the number of jobs the gather kernel has run.
func (d *Driver) GatherJobs() int64 { return d.kctl(kctlJobs, 0, 0) }

// Modules returns the number of modules loaded and not unloaded.
func (d *Driver) Modules() int64 { return d.kctl(kctlModules, 0, 0) }

// SkipData makes copies and kernels check their arguments and ranges as usual but move no
// byte (on), for benchmarks of the CPU cost of queueing them; off (the default) moves bytes.
func (d *Driver) SkipData(on bool) { d.kctl(kctlSkipData, b2i(on), 0) }
