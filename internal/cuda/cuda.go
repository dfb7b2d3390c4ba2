// Package cuda is pinmalloc's binding to the CUDA driver API, loaded at run time.
//
// # Design
//
// No CUDA toolkit is needed to build it. On linux with cgo, libcuda.so.1 is opened with dlopen
// the first time it is needed (Load, Count or Open), and each driver entry point is resolved
// lazily, once, with an explicit API version: through cuGetProcAddress_v2(name, 12000, ...)
// when the driver has it, else by dlsym of the explicitly versioned name (cuMemAlloc_v2,
// cuMemHostRegister_v2, ...), never the bare legacy name. A symbol the driver lacks is an error
// wrapping ErrSymbol that names it, reported by the call that needs it; nothing panics. A library
// without cuInit is no driver: its error matches ErrNoDriver too. An error that wraps a driver
// error says "cuda: " once ("cuda: device 1: CUDA_ERROR_INVALID_DEVICE: ..."). Calls go
// through small C shims that take the function pointer and the arguments. No cuda.h is
// included: the few driver structs used (CUmemLocation, CUmemAllocationProp, CUmemAccessDesc,
// CUmemcpyAttributes) are declared with the same layout in the cgo preambles and built in C.
//
// Without cgo, or off linux, the same API compiles and every entry point reports ErrNoDriver,
// so one source tree serves machines with and without a GPU.
//
// # Contexts and threads
//
// A CUDA context is current per OS thread and goroutines migrate between threads, so every
// driver call that needs a context runs inside (*Device).Do: the goroutine is locked to its
// thread, the device's primary context is pushed, the call runs, the context is popped and the
// thread unlocked. Primary contexts are the ones the CUDA runtime, PyTorch and CuPy use, so
// memory allocated here is usable by them and the other way round.
//
// # Handles
//
// Device pointers, streams and events cross the API as raw handles (DevicePtr, Stream, Event
// are aliases of uintptr, the representation gorgonia.org/cu uses for cu.DevicePtr and
// CUstream). The public package cuda declares them as types of their own (cuda.Stream is not a
// cuda.Event), and converts at its boundary: it imports this package, so this one cannot use
// its types, and the module's packages below the public API (fakecuda, streamq, the EventPool)
// keep one representation. Host pointers are
// uintptr as well: the package never dereferences them, and the memory they point to must stay
// where it is, and stay allocated, for as long as the driver may use it. Memory from mmap,
// MemHostAlloc or C is. Go memory is dead to the garbage collector from the moment its address
// is a uintptr, and a buffer on a goroutine's stack moves when the stack grows (in Do, before
// the driver call), leaving the uintptr behind: pin it (runtime.Pinner, which also moves it to
// the heap) before taking the address and until the call has returned, as device.Heap's copies
// do; runtime.KeepAlive is not enough. That covers the copies (a copy from or to pageable
// memory, Go's included, has read or written it when it returns), never a registration, a
// mapped pointer or a batch (MemcpyBatchAsync reads its sources in stream order): give those
// no Go memory.
//
// # Captures begun by another binding
//
// A CUDA graph capture of a stream forbids a query or synchronize of it, and would take a
// record made in it (capture.go). Before the library queries, synchronizes or records its own
// event in a user's stream it asks whether the stream captures (StreamIsCapturing), and it
// holds the capture gate (HoldCaptureBegins) from the ask through the act: a capture begun
// through this package (StreamBeginCapture) never falls between them. A capture begun by
// other code (another binding of the driver: the CUDA runtime, PyTorch, CuPy, cgo) on another
// thread does not wait for the gate. What it does to the library depends on when it falls:
//
//   - Between an ask and a query or synchronize: the driver refuses the call and invalidates
//     the capture, whose end then gives no graph.
//   - Between the first ask of EventRecordOutsideCapture and its record, and still going on at
//     its second ask, made right after the record in the same cgo call: the record may be the
//     capture's. The call answers the stream capturing and taints the event (EventTainted);
//     the library never takes it for a point, and destroys it once an ask finds the stream
//     not capturing (capturetaint.go).
//   - Begun after the first ask and ended before the second, with the record inside it: not
//     caught. Nothing left after the record tells it from a record outside any capture: a
//     stream's capture status is the present one (cuStreamIsCapturing), the sequence id of
//     cuStreamGetCaptureInfo exists only while a capture goes on, and an event whose last
//     record was in an ended capture reads complete (the fake's model, which
//     internal/fakecuda's TestCUDACaptureRules asks a GPU: EventAfterCapture).
//     EventRecordOutsideCapture then answers CaptureNone, the event untainted, and the caller
//     takes it for a point of the stream that stands for none: a query finds it complete at
//     once while the work queued before it may still run, and memory whose reuse waits for
//     that point (a deferred free, a pool's buffer) may be reused under that work. The window
//     spans one driver call, the record, made back to back with the two asks in one cgo call,
//     and the other binding must both begin and end its capture of that very stream inside it.
//
// A program that captures with another binding closes every window by not capturing a stream
// while a call of the library that may query, synchronize or record in that stream runs on
// another goroutine: an Alloc, Free or FreeAsync of a pool or heap that has the stream's
// frees, or its purge timer (a negative Options.PurgeDelay turns it off), as the public
// packages' FreeAsync docs advise.
//
// # Invariants
//
//   - Load, cuInit and each symbol resolution happen at most once per process.
//   - Every Open takes one primary-context retain, which its Device's Close gives back once:
//     the first Close whose release the driver takes (a refused release leaves the retain to a
//     later Close); PrimaryRetains reports the retains outstanding.
//   - Close gives its retain back only once no call of the Device is in flight in the context
//     (calls.go); a call that starts after Close began fails with ErrClosed, unless it is
//     nested in a call in flight, which Close waits for.
//   - Each Device counts the resources live through it (Stats) so tests can assert no leak.
package cuda

// DevicePtr is a CUDA device address (CUdeviceptr), as a raw handle.
type DevicePtr = uintptr

// Stream is a CUDA stream handle (CUstream); 0 is the legacy default stream.
type Stream = uintptr

// Event is a CUDA event handle (CUevent).
type Event = uintptr

// MemHandle is a CUDA physical allocation handle (CUmemGenericAllocationHandle) made by
// MemCreate.
type MemHandle = uint64

// Flags for MemHostAlloc (CU_MEMHOSTALLOC_*). On a device with unified addressing (every
// 64-bit platform CUDA supports) cuMemHostAlloc memory is every context's, and its host address
// is its device address, with or without HostAllocPortable and HostAllocDeviceMap (the driver
// API's Unified Addressing section; write-combined memory's device address is another);
// MemHostGetDevicePointer still needs HostAllocDeviceMap.
const (
	// HostAllocPortable makes the allocation pinned for every context, not only the caller's.
	HostAllocPortable uint32 = 0x1
	// HostAllocDeviceMap maps the allocation into the device address space
	// (see MemHostGetDevicePointer).
	HostAllocDeviceMap uint32 = 0x2
	// HostAllocWriteCombined allocates write-combined memory: fast to write from the host and
	// to read by the device over PCIe, very slow to read from the host.
	HostAllocWriteCombined uint32 = 0x4
)

// Flags for MemHostRegister (CU_MEMHOSTREGISTER_*).
const (
	// HostRegisterPortable makes the registration visible to every context.
	HostRegisterPortable uint32 = 0x1
	// HostRegisterDeviceMap maps the range into the device address space.
	HostRegisterDeviceMap uint32 = 0x2
	// HostRegisterIOMemory registers memory that is I/O memory (a PCI BAR), not RAM.
	HostRegisterIOMemory uint32 = 0x4
	// HostRegisterReadOnly registers the range as read-only for the device.
	HostRegisterReadOnly uint32 = 0x8
)

// Flags for MemAllocManaged (CU_MEM_ATTACH_*).
const (
	// MemAttachGlobal makes managed memory accessible from any stream on any device.
	MemAttachGlobal uint32 = 0x1
	// MemAttachHost makes managed memory initially accessible from the host only.
	MemAttachHost uint32 = 0x2
	// MemAttachSingle attaches managed memory to a single stream.
	MemAttachSingle uint32 = 0x4
)

// Device attributes for (*Device).Attribute (CU_DEVICE_ATTRIBUTE_*).
const (
	// AttrIntegrated is 1 for an integrated GPU that shares memory with the host.
	AttrIntegrated = 18
	// AttrCanMapHostMemory is 1 when host memory can be mapped into the device.
	AttrCanMapHostMemory = 19
	// AttrAsyncEngineCount is the number of copy engines.
	AttrAsyncEngineCount = 40
	// AttrUnifiedAddressing is 1 when host and device share one address space.
	AttrUnifiedAddressing = 41
	// AttrComputeCapabilityMajor is the major compute capability.
	AttrComputeCapabilityMajor = 75
	// AttrComputeCapabilityMinor is the minor compute capability.
	AttrComputeCapabilityMinor = 76
	// AttrManagedMemory is 1 when the device supports managed memory.
	AttrManagedMemory = 83
	// AttrPageableMemoryAccess is 1 when the device can access pageable host memory coherently.
	AttrPageableMemoryAccess = 88
	// AttrConcurrentManagedAccess is 1 when managed memory can be used by host and device at
	// once (required for MemPrefetchAsync and most MemAdvise advice).
	AttrConcurrentManagedAccess = 89
	// AttrHostRegisterSupported is 1 when MemHostRegister is supported.
	AttrHostRegisterSupported = 99
	// AttrVirtualMemoryManagementSupported is 1 when the VMM API (MemAddressReserve,
	// MemCreate, MemMap, ...) is supported.
	AttrVirtualMemoryManagementSupported = 102
	// AttrMemoryPoolsSupported is 1 when MemAllocAsync and MemFreeAsync are supported.
	AttrMemoryPoolsSupported = 115
)

// MemLocation is a CUmemLocation as the driver takes it: a CU_MEM_LOCATION_TYPE_* and an id
// whose meaning the type gives (a device ordinal, a host NUMA node). The module's vocabulary is
// the public cuda.Location, with its typed constants; the packages above this binding convert
// one to the other where they call it (cudamem).
type MemLocation struct{ Type, ID int32 }

// libName is the driver library opened by Load.
const libName = "libcuda.so.1"

// LibraryEnv names the environment variable that, when set and not empty, gives the path of
// the library Load opens instead of libcuda.so.1. It is read once, by the first Load. Tests in
// other packages point it at a fake driver built at test time (internal/fakecuda); it can also
// select one driver among several installed.
const LibraryEnv = "PINMALLOC_LIBCUDA"

// apiVersion is the CUDA API version asked of cuGetProcAddress for most entry points.
const apiVersion = 12000
