package copyengine

import "fmt"

// Method is how a Batcher moves a batch.
type Method uint8

// Copy methods.
const (
	// MethodAuto picks MethodKernel, else MethodBatchAPI, else MethodPerCopy.
	MethodAuto Method = iota
	// MethodKernel launches the gather/scatter kernel once per batch.
	MethodKernel
	// MethodBatchAPI calls cuMemcpyBatchAsync_v2 once per batch (CUDA 13.0 drivers).
	MethodBatchAPI
	// MethodPerCopy calls cuMemcpyAsync once per job.
	MethodPerCopy
)

// String returns the method's name.
func (m Method) String() string {
	switch m {
	case MethodAuto:
		return "auto"
	case MethodKernel:
		return "kernel"
	case MethodBatchAPI:
		return "batch-api"
	case MethodPerCopy:
		return "per-copy"
	}
	return fmt.Sprintf("Method(%d)", uint8(m))
}

// Options configures a Batcher. The zero value picks the best method and launches one block
// per job on the caller's stream.
type Options struct {
	// Method forces a method (tests, benchmarks, a caller that measured); MethodAuto picks
	// the fastest per batch, from a calibration (see the package comment).
	Method Method
	// LowPriority runs the kernel on a stream of the device's least priority (fenced to the
	// caller's stream by events) with a bounded grid (MaxBlocks, default 2 blocks per SM), so
	// that it yields SMs to the caller's kernels. It has no effect on the copy-engine methods.
	LowPriority bool
	// MaxBlocks bounds the kernel's grid; blocks stride over the jobs. Zero means one block per
	// job (or, with LowPriority, 2 per SM).
	MaxBlocks int
	// SMShare caps the kernel's grid at this share of the device's multiprocessors, at least
	// one block: a block runs on one multiprocessor, so at most that share of them copy while
	// the rest run the caller's kernels (SGLang caps its copy kernel's blocks the same way).
	// Zero means no cap; it must lie in [0, 1]. With MaxBlocks too, the smaller cap holds. The
	// calibration times the kernel under the cap.
	SMShare float64
	// BlockThreads is the kernel's threads per block: a multiple of 32 up to 1024 (default 256).
	BlockThreads int
	// TrustNoOverlap skips the check that no two jobs of a batch overlap (a sort of the
	// batch's ranges: on the build machine about 160 of the 185 ns of CPU per job of a batch of
	// 4096 blocks queued as one kernel launch), for callers
	// whose blocks cannot overlap by construction, like the uvm tier's. Overlapping jobs then
	// race. The checks of each job (ErrInvalidJob) stay.
	TrustNoOverlap bool
}
