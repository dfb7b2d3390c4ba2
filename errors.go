// Package pinmalloc is the vocabulary of errors that pinmalloc's packages share. The allocators
// are in the packages below it: pinned (pinned host buffers), device (GPU memory with
// stream-ordered frees), uvm (device blocks tiered over VRAM and pinned host memory), heap and
// arena (the allocator and where its memory comes from), cudamem (arena providers of CUDA
// memory) and cuda (the device, its streams and events).
//
// # One error vocabulary
//
// Each kind of failure that more than one package reports is one sentinel here:
// ErrOutOfMemory, ErrClosed, ErrDoubleFree, ErrInvalidStream and the others below. A package
// keeps sentinels of its own, whose text names the package and what failed ("pinned: pool
// closed", "heap: double free"), and each of them matches its kind under errors.Is as well:
// every exported Err variable of every package matches one kind here. So
// code that handles errors of one package tests that package's sentinel, and code that handles
// several tests the kind once:
//
//	if errors.Is(err, pinmalloc.ErrOutOfMemory) { // a full pool, a full device heap, the driver
//
// The CUDA driver's classes of failure (ErrNoDriver, ErrNotReady, ...) are here too, because
// the packages that call the driver and the binding underneath them share them; package cuda
// re-exports them, and a failed driver call matches the class of its CUresult.
//
// Where a package wraps an error of a package below it, the cause stays in the chain
// (errors.Is(err, heap.ErrDoubleFree) and errors.Is(err, pinned.ErrDoubleFree) both hold for
// a double free in a pinned.Pool).
package pinmalloc

import "errors"

// Kinds of failure. Every sentinel of the module's packages matches one of these, or one of
// the driver's classes below.
var (
	// ErrOutOfMemory: the memory asked for cannot be had: a pool or heap is full, the driver
	// is out of device memory (CUDA_ERROR_OUT_OF_MEMORY), or the system refused memory.
	ErrOutOfMemory = errors.New("pinmalloc: out of memory")
	// ErrClosed: a pool, heap, arena, tier, batcher or device was used after Close.
	ErrClosed = errors.New("pinmalloc: used after Close")
	// ErrDoubleFree: a free of memory that is not live (freed already, or never handed out).
	ErrDoubleFree = errors.New("pinmalloc: double free")
	// ErrNotOwned: an address or buffer that is not memory of the pool or heap it was given to.
	ErrNotOwned = errors.New("pinmalloc: not owned")
	// ErrInvalidSize: a size of zero (or less).
	ErrInvalidSize = errors.New("pinmalloc: invalid size")
	// ErrTooLarge: a size beyond what the pool, heap or tier could ever hold.
	ErrTooLarge = errors.New("pinmalloc: too large")
	// ErrInvalidAlign: an alignment that is not a power of two, or out of range.
	ErrInvalidAlign = errors.New("pinmalloc: invalid alignment")
	// ErrLiveBlocks: Close found memory still handed out; nothing was released.
	ErrLiveBlocks = errors.New("pinmalloc: blocks still live")
	// ErrMemlock: the memlock limit (RLIMIT_MEMLOCK) forbids locking more memory.
	ErrMemlock = errors.New("pinmalloc: memlock limit reached")
	// ErrQuota: an allocation would take the live bytes beyond a quota.
	ErrQuota = errors.New("pinmalloc: quota exceeded")
	// ErrInvalidStream: a CUDA stream the driver refuses (never made, destroyed, or of another
	// context).
	ErrInvalidStream = errors.New("pinmalloc: invalid stream")
	// ErrInvalid: options or an argument that cannot work.
	ErrInvalid = errors.New("pinmalloc: invalid argument")
	// ErrBusy: the memory asked about is still in use by work in flight or by a holder (a
	// stream that has not passed a free, an acquired block); the call did nothing, and a later
	// one may succeed.
	ErrBusy = errors.New("pinmalloc: busy")
	// ErrRefused: the system, the CUDA driver or a peer process refused a call (mmap, mlock,
	// cuMemCreate, an attach) for a reason the error's cause gives; where the reason is a want
	// of memory, the cause matches ErrOutOfMemory too.
	ErrRefused = errors.New("pinmalloc: refused")
	// ErrNoUCX: the UCX library (libucp.so.0) could not be loaded: it is absent, older than
	// this module needs, lacks an entry point the module calls, or the program was built without
	// cgo; or UCX refused the configuration the environment gives it (UCX_TLS naming no
	// transport this host has, ...). The error names why. Package remote's pools over the
	// network need it; nothing else does.
	ErrNoUCX = errors.New("pinmalloc: no UCX library")
)

// Classes of CUDA driver failure. A driver call's error (a CUresult) matches the class of its
// result; package cuda re-exports them.
var (
	// ErrNoDriver: the CUDA driver library could not be loaded (libcuda.so.1 is absent, it is a
	// stub, it has no cuInit, or the program was built without cgo). The error names why.
	ErrNoDriver = errors.New("cuda: no CUDA driver")
	// ErrNoDevice: the driver found no CUDA device, or none of that ordinal.
	ErrNoDevice = errors.New("cuda: no CUDA device")
	// ErrSymbol: the driver lacks an entry point (it is too old); the error names it.
	ErrSymbol = errors.New("cuda: driver entry point not found")
	// ErrInvalidValue: CUDA_ERROR_INVALID_VALUE, and arguments the binding refuses.
	ErrInvalidValue = errors.New("cuda: invalid value")
	// ErrNotSupported: CUDA_ERROR_NOT_SUPPORTED.
	ErrNotSupported = errors.New("cuda: operation not supported")
	// ErrInvalidHandle: CUDA_ERROR_INVALID_HANDLE, a stream or event the driver does not know
	// (destroyed, or of another context).
	ErrInvalidHandle = errors.New("cuda: invalid resource handle")
	// ErrNotReady: CUDA_ERROR_NOT_READY, the work queried has not completed yet.
	ErrNotReady = errors.New("cuda: not ready")
	// ErrAlreadyRegistered: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED.
	ErrAlreadyRegistered = errors.New("cuda: host memory already registered")
	// ErrCapturing: the stream is capturing a CUDA graph (cuStreamBeginCapture), which forbids
	// the call: the driver's capture refusals (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
	// _INVALIDATED, _MERGE, _UNMATCHED, _UNJOINED, _ISOLATION, _IMPLICIT, _WRONG_THREAD and
	// CUDA_ERROR_CAPTURED_EVENT), and the module's refusals of the same kind (uvm's
	// Acquire, Release, Prefetch and Free and copyengine's Copy on a capturing stream, whose
	// work would go into the graph; a device heap's Sync and Trim, which cannot wait for it).
	ErrCapturing = errors.New("cuda: stream is capturing a graph")
	// ErrDeviceFault: the device faulted while it ran work of the process's context (an
	// illegal address, a misaligned one, an assert in device code, a kernel's exception:
	// CUDA_ERROR_ILLEGAL_ADDRESS, _MISALIGNED_ADDRESS, _ASSERT, _LAUNCH_FAILED and the others the
	// driver documents as leaving the process in an inconsistent state). The error is sticky:
	// every later call of the context returns it, memory on the device is lost, and the process
	// must exit to use CUDA again. A stream or event the module checks then is not refused as
	// invalid: the error is the fault's.
	ErrDeviceFault = errors.New("cuda: the device faulted; the context is unusable until the process exits")
)
