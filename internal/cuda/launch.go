package cuda

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/pinmalloc/pinmalloc"
)

// Stream dependencies and priorities, generic and batched copies, and kernels loaded from PTX
// at run time. The copy engine (package copyengine, its Batcher) is built on them: one kernel
// launch moves a whole batch of blocks, cuMemcpyBatchAsync is its fallback and one
// cuMemcpyAsync per block the fallback's.
//
// cuMemcpyBatchAsync is bound in its CUDA 13.0 form (cuMemcpyBatchAsync_v2, without the failIdx
// argument of CUDA 12.8): on an older driver MemcpyBatchSupported reports an error matching
// ErrSymbol and MemcpyBatchAsync fails the same way, so callers fall back.

// Module is a loaded CUDA module (CUmodule), as a raw handle.
type Module = uintptr

// Function is a kernel of a loaded module (CUfunction), as a raw handle. It is valid until its
// module is unloaded.
type Function = uintptr

// Dim3 is a grid or block shape for LaunchKernel.
type Dim3 struct{ X, Y, Z uint32 }

// MaxKernelArgs is the most arguments LaunchKernel passes to a kernel.
const MaxKernelArgs = 8

// Flags for MemcpyBatchAsync (CUmemcpyFlags).
const (
	// MemcpyPreferOverlapWithCompute asks the driver to prefer copy engines that overlap with
	// compute work (CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE).
	MemcpyPreferOverlapWithCompute uint32 = 0x1
)

// AttrMultiprocessorCount is the number of streaming multiprocessors (CU_DEVICE_ATTRIBUTE_
// MULTIPROCESSOR_COUNT), for sizing bounded grids.
const AttrMultiprocessorCount = 16

// StreamWaitEvent makes all work queued on s after this call wait until ev has completed. An
// event that was never recorded is already complete (the call is then a no-op), as in the
// driver.
func (d *Device) StreamWaitEvent(s Stream, ev Event) error {
	return d.Do(func() error { return d.drv.streamWaitEvent(s, ev) })
}

// StreamPriorityRange returns the device's stream priorities: least is the lowest priority and
// greatest the highest, numerically smaller (0 and -5 on an H100). Streams made by StreamCreate
// have the default priority, which is least on current GPUs: a stream meant to yield to them
// can only be at their level, and they must be raised to greatest to win.
func (d *Device) StreamPriorityRange() (least, greatest int, err error) {
	err = d.Do(func() (e error) { least, greatest, e = d.drv.streamPriorityRange(); return })
	return
}

// StreamCreateWithPriority creates a stream with a priority from StreamPriorityRange (a value
// outside the range is clamped by the driver). Destroy it with StreamDestroy.
func (d *Device) StreamCreateWithPriority(nonBlocking bool, priority int) (s Stream, err error) {
	var flags uint32
	if nonBlocking {
		flags = 0x1 // CU_STREAM_NON_BLOCKING
	}
	err = d.Do(func() (e error) { s, e = d.drv.streamCreateWithPriority(flags, priority); return })
	return s, d.track(&d.streams, uint64(s), 1, err)
}

// priorityArg is priority as the driver's int takes it: clamped to the int's range, not
// truncated, so that a value beyond it stays on its side and the driver clamps it into the
// device's range.
func priorityArg(priority int) int32 {
	return int32(min(max(priority, math.MinInt32), math.MaxInt32))
}

// MemcpyAsync queues a copy of n bytes from src to dst on s, where each is a device address or
// a host address (unified addressing tells which). Host memory must be page-locked for the
// copy to be asynchronous, and one copy's host range must lie inside one registration.
func (d *Device) MemcpyAsync(dst, src, n uintptr, s Stream) error {
	return d.Do(func() error { return d.drv.memcpyAsync(dst, src, n, s) })
}

// batchSupport caches, per driver, whether it has cuMemcpyBatchAsync_v2: *driver → error, nil
// or one matching ErrSymbol.
var batchSupport sync.Map

// MemcpyBatchSupported returns nil when the driver has cuMemcpyBatchAsync_v2 (CUDA 13.0 or
// later), else an error matching ErrSymbol, or the driver's error where it could not tell. It
// asks the driver once; a failure to tell is not remembered, and the next call asks again.
func (d *Device) MemcpyBatchSupported() error {
	if err, ok := batchSupport.Load(d.drv); ok {
		err, _ := err.(error)
		return err
	}
	var err error
	switch v, verr := d.drv.driverVersion(); {
	case verr != nil:
		err = verr
	case v < 13000:
		err = fmt.Errorf("%w: cuMemcpyBatchAsync_v2 needs a CUDA 13.0 driver, this one is %d.%d", pinmalloc.ErrSymbol, v/1000, v%1000/10)
	default:
		err = d.drv.memcpyBatchSymbol()
	}
	if err == nil || errors.Is(err, pinmalloc.ErrSymbol) {
		batchSupport.Store(d.drv, err)
	}
	return err
}

// MemcpyBatchAsync queues len(dsts) copies on s in one driver call: sizes[i] bytes from srcs[i]
// to dsts[i], each a device or host address as for MemcpyAsync, sources read in stream order.
// The copies of a batch run in no particular order, so they must not depend on each other. The
// three slices must have the same non-zero length. flags is 0 or MemcpyPreferOverlapWithCompute.
// The driver refuses the legacy default stream (0).
func (d *Device) MemcpyBatchAsync(dsts, srcs, sizes []uintptr, flags uint32, s Stream) error {
	if len(dsts) == 0 || len(srcs) != len(dsts) || len(sizes) != len(dsts) {
		return fmt.Errorf("%w: MemcpyBatchAsync of %d destinations, %d sources, %d sizes",
			pinmalloc.ErrInvalidValue, len(dsts), len(srcs), len(sizes))
	}
	if err := d.MemcpyBatchSupported(); err != nil {
		return err
	}
	return d.Do(func() error { return d.drv.memcpyBatchAsync(dsts, srcs, sizes, flags, s) })
}

// ModuleLoadData loads a module from an image: PTX text (JIT-compiled by the driver, which
// caches the result on disk), a cubin or a fatbin. Unload it with ModuleUnload.
func (d *Device) ModuleLoadData(image string) (m Module, err error) {
	if image == "" {
		return 0, fmt.Errorf("%w: empty module image", pinmalloc.ErrInvalidValue)
	}
	err = d.Do(func() (e error) { m, e = d.drv.moduleLoadData(image); return })
	return m, d.track(&d.modules, uint64(m), 1, err)
}

// ModuleGetFunction returns the kernel named name (its .entry name) in m.
func (d *Device) ModuleGetFunction(m Module, name string) (f Function, err error) {
	err = d.Do(func() (e error) { f, e = d.drv.moduleGetFunction(m, name); return })
	return
}

// ModuleUnload unloads a module from ModuleLoadData; its functions become invalid.
func (d *Device) ModuleUnload(m Module) error {
	return d.track(&d.modules, uint64(m), -1, d.Do(func() error { return d.drv.moduleUnload(m) }))
}

// LaunchKernel queues kernel f on s with the given grid and block shapes and dynamic shared
// memory. Each argument fills one 8-byte parameter slot in order (a .u64 or pointer parameter;
// a 4-byte parameter reads the low half of its slot). At most MaxKernelArgs arguments.
func (d *Device) LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, args ...uint64) error {
	if len(args) > MaxKernelArgs {
		return fmt.Errorf("%w: %d kernel arguments, at most %d", pinmalloc.ErrInvalidValue, len(args), MaxKernelArgs)
	}
	return d.Do(func() error { return d.drv.launchKernel(f, grid, block, sharedMem, s, args) })
}
