package cudatest

import (
	"testing"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/internal/fakecuda"
)

// Fake controls the fake driver a test runs on, and reads what it holds. Device returns it. Its
// methods act on the whole fake (every stream of device 0), at once. The nil Fake that Device
// returns in the test process has no fake: its methods panic, saying the test must return.
type Fake struct {
	t testing.TB
	d *fakecuda.Driver
}

// driver returns the fake f controls. A nil or zero Fake (Device's in the test process, which
// must return at once) has none: it panics saying so, rather than with a nil dereference.
func (f *Fake) driver() *fakecuda.Driver {
	if f == nil || f.d == nil {
		panic("cudatest: a nil Fake: Device returns nil, nil in the test process, " +
			"where the test must return at once (if dev == nil { return })")
	}
	return f.d
}

// Hold keeps queued work pending (on), as on a busy GPU: stream and event queries answer "not
// ready" (cuda.ErrNotReady) instead of running the work, until Complete, CompleteStream or a
// synchronizing call (a stream, event or device synchronize, which waits for it as on a GPU).
// Off, the default, a query runs the work it finds pending and answers ready. Turning Hold off
// completes nothing by itself.
//
// With Hold on, a pool or heap that frees in stream order keeps the memory of a stream that
// has not passed its free: the test sees what a program sees while its copies are in flight.
func (f *Fake) Hold(on bool) { f.driver().Hold(on) }

// Complete runs all the work queued on every stream, as if the GPU had caught up.
func (f *Fake) Complete() { f.driver().Complete() }

// CompleteStream runs the work queued on stream s (0: the legacy default stream), and before it
// the work of other streams that s waits for (through cuda.Device.StreamWaitEvent).
func (f *Fake) CompleteStream(s cuda.Stream) { f.driver().CompleteStream(uintptr(s)) }

// Pending returns the number of streams with work queued and not yet run.
func (f *Fake) Pending() int { return f.driver().Pending() }

// SetMemory sets device 0's total memory to bytes (1 GiB by default): allocations beyond it fail
// with an error matching cuda.ErrOutOfMemory, and cuda.Device.MemInfo and TotalMem report it.
// A negative size, or one below the memory in use now (Used), fails the test.
func (f *Fake) SetMemory(bytes int) {
	f.driver()
	f.t.Helper()
	if bytes < 0 {
		f.t.Fatalf("cudatest: SetMemory(%d): not a size", bytes)
	}
	if used := f.Used(); bytes < used {
		f.t.Fatalf("cudatest: SetMemory(%d): below the %d bytes device 0 uses now", bytes, used)
	}
	f.d.SetMemory(0, uint64(bytes))
}

// Used returns the device memory allocated on device 0 now, in bytes: every allocation the
// driver made, whatever made it (device heaps commit memory in 2 MiB chunks, not per block).
func (f *Fake) Used() int { return int(f.driver().Used(0)) }

// SetHostVMM turns VMM host memory off (on, the default, is a driver of CUDA 13): off, the
// fake is a driver without it (before CUDA 12.2, or without host NUMA support), and pinned
// pools of the CUDAHost backend map their memory themselves and pin it with
// cuMemHostRegister (the HostRegister and HostUnregister calls of FailNext) instead of
// creating it with cuMemCreate. It applies to pools made after it.
func (f *Fake) SetHostVMM(on bool) { f.driver().SetHostVMM(on) }

// Call names a driver call FailNext can make fail.
type Call int

// Calls FailNext can make fail.
const (
	// MemCreate is cuMemCreate: device heaps commit VRAM with it, and pinned pools of the
	// CUDAHost backend their host memory where the driver has VMM host memory.
	MemCreate Call = iota + 1
	// MemMap is cuMemMap, which maps what cuMemCreate made.
	MemMap
	// HostRegister is cuMemHostRegister, which pins host memory the pool mapped itself
	// (SetHostVMM(false)).
	HostRegister
	// LaunchKernel is cuLaunchKernel: copyengine.Batcher's gather kernel, and a uvm tier's moves.
	LaunchKernel
	// EventRecord is cuEventRecord: the points that order reuse in stream order (a pinned
	// pool's and a device heap's frees, a uvm tier's moves) and cuda.Device.EventRecord. A
	// record that fails queues nothing and leaves the event as it was: one never recorded
	// stays complete, one recorded before still stands for that earlier record.
	EventRecord
	// MemUnmap is cuMemUnmap, and MemRelease cuMemRelease: a device heap's (and a VMM host
	// pool's) memory given back after the purge delay or at Trim. A give-back the driver
	// refuses leaves the memory mapped and in use by the heap, given back at a later purge.
	MemUnmap
	MemRelease
	// HostUnregister is cuMemHostUnregister, which unpins what HostRegister pinned: a pool's
	// memory given back after the purge delay, at Trim or at Close. A give-back the driver
	// refuses leaves the memory pinned, mapped and the pool's (counted in its Stats), given back
	// at a later purge, Trim or Close.
	HostUnregister
	// StreamDestroy is cuStreamDestroy: cuda.Device.StreamDestroy, and the Close of what made a
	// stream of its own (a copyengine.Batcher, a uvm tier). A destroy the driver refuses leaves
	// the stream alive and usable: Device.StreamDestroy returns the refusal and a later call
	// destroys it; a Close returns the refusal, keeps the stream and its next Close destroys it.
	StreamDestroy
	// EventDestroy is cuEventDestroy: cuda.Device.EventDestroy, and the Close of what keeps
	// events of its own (a copyengine.Batcher, a uvm tier, a device heap). A refused destroy
	// leaves the event alive and as it was, as StreamDestroy leaves its stream: the call
	// returns the refusal, and a later call or Close destroys it.
	EventDestroy
	// ModuleUnload is cuModuleUnload: a copyengine.Batcher's Close unloads its gather kernel
	// with it. An unload the driver refuses leaves the kernel loaded: Close returns the refusal
	// and its next Close unloads it.
	ModuleUnload
	// MemFree is cuMemFree: the device buffer a copyengine.Batcher calibrates with. A free the
	// driver refuses leaves the memory allocated (Used counts it): the calibration's error says
	// so (Batcher.Calibration), and the Batcher's Close frees it.
	MemFree
	// MemAddressFree is cuMemAddressFree: the address range of a device heap (and of an arena
	// on a VMM provider of package cudamem), given back at its Close once its memory is
	// unmapped and released. A free the driver refuses keeps the range: Close returns the
	// refusal, and the next Close frees it.
	MemAddressFree
)

// Driver result codes (CUresult) for FailNext; cuda.ResultCode returns them from an error.
const (
	// InvalidValue is CUDA_ERROR_INVALID_VALUE; errors match cuda.ErrInvalidValue.
	InvalidValue = fakecuda.ResultInvalidValue
	// OutOfMemory is CUDA_ERROR_OUT_OF_MEMORY; errors match cuda.ErrOutOfMemory.
	OutOfMemory = fakecuda.ResultOutOfMemory
	// NotPermitted is CUDA_ERROR_NOT_PERMITTED.
	NotPermitted = fakecuda.ResultNotPermitted
	// NotSupported is CUDA_ERROR_NOT_SUPPORTED; errors match cuda.ErrNotSupported.
	NotSupported = fakecuda.ResultNotSupported
	// InvalidHandle is CUDA_ERROR_INVALID_HANDLE, the driver's answer to a destroy of a stream
	// or event it does not know; errors match cuda.ErrInvalidHandle.
	InvalidHandle = fakecuda.ResultInvalidHandle
	// LaunchFailed is CUDA_ERROR_LAUNCH_FAILED.
	LaunchFailed = fakecuda.ResultLaunchFailed
)

// FailNext makes the next call of c that passes its argument checks fail with the result code
// (OutOfMemory, ...), once. A failed launch runs nothing. Calling it again for the same call
// before that call replaces the failure set, it does not add one; failures set for different
// calls stand side by side (a refused MemRelease and a refused MemUnmap, say).
func (f *Fake) FailNext(c Call, code int) {
	f.driver()
	f.t.Helper()
	if code <= 0 || code > 0xffff {
		f.t.Fatalf("cudatest: FailNext(%d, %d): not a CUDA error code", c, code)
	}
	switch fc, ok := failCalls[c]; {
	case c == LaunchKernel:
		f.d.FailLaunch(1, code)
	case ok:
		f.d.FailAfter(fc, 0, code)
	default:
		f.t.Fatalf("cudatest: FailNext: unknown call %d", c)
	}
}

// failCalls is the fake's call of each Call FailNext refuses with FailAfter (LaunchKernel
// fails through FailLaunch).
var failCalls = map[Call]fakecuda.PinCall{
	MemCreate: fakecuda.CallCreate, MemMap: fakecuda.CallMap, HostRegister: fakecuda.CallRegister,
	EventRecord: fakecuda.CallRecord, MemUnmap: fakecuda.CallUnmap, MemRelease: fakecuda.CallRelease,
	HostUnregister: fakecuda.CallUnregister, StreamDestroy: fakecuda.CallStreamDestroy,
	EventDestroy: fakecuda.CallEventDestroy, ModuleUnload: fakecuda.CallModuleUnload,
	MemFree: fakecuda.CallMemFree, MemAddressFree: fakecuda.CallAddressFree,
}
