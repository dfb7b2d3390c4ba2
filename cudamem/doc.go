// Package cudamem is where an arena's memory comes from when CUDA gives it: arena.Provider
// implementations for pinned host memory, device memory and managed memory.
//
//	dev, err := cuda.Open(0)
//	defer dev.Close()
//	prov, err := cudamem.NewHost(dev, cudamem.HostOptions{}) // VMM host granules, else registered mmap
//	a, err := arena.New(arena.Options{Provider: prov, Capacity: 1 << 30})
//	defer a.Close()
//	sp, err := a.Alloc(4<<20, 64)       // 4 MiB, committed and pinned
//	b, err := a.Bytes(sp.Base, sp.Size) // a []byte the driver copies by DMA
//	err = a.Free(sp)
//
// Most programs take the memory through pinned.Pool (the CUDAHost backend: OpenHost) or
// device.Heap (NewDevice), which put a heap of buffers over such an arena. The providers reach
// the driver through internal/cuda, which loads it at run time. One file per provider, each
// opening with when to choose it:
//
//   - Pinned host memory: NewHost picks VMM host granules (HostVMM) where
//     the driver has them, else mmap + cuMemHostRegister (HostRegister);
//     cuMemHostAlloc (HostAlloc) is kept for comparison. OpenHost opens the
//     device as well, for pinned.Pool's CUDAHost backend.
//   - Device memory: NewDevice picks the VMM API (DeviceVMM), which
//     commits and decommits in 2 MiB granules, else cuMemAlloc (DeviceMalloc);
//     DefaultDeviceCapacity sizes an arena by the device's free memory.
//   - Managed memory: cuMemAllocManaged (Managed), with Prefetch and Advise.
//   - What providers share: the device, counters and errors; the host providers'
//     options; the device providers' capacity and memset; the VMM
//     machinery of HostVMM and DeviceVMM; the one-allocation regions of HostAlloc,
//     DeviceMalloc and Managed.
//   - The host NUMA node of a GPU: DeviceNode, where the host providers place their
//     memory by default.
//   - Host memory several processes share (for package ipcpool): RegisterShared of
//     each region a process maps, or VMM host granules one process exports (NewHostExport)
//     and the others import and map (ImportHostExport, MapHostExports).
//
// # Optional capabilities
//
// The arena finds a provider's optional interfaces by type assertion.
// Which provider implements which (x: implements; the test TestCapabilityTable holds this
// table against the types):
//
//	provider      Zeroer  FixedCapacity  CapacityDefaulter  Placer  Reporter  Threaded  Prefaulter  Joiner
//	HostVMM       x       -              -                  x       x         x         -           -
//	HostRegister  x       -              -                  x       x         x         x           x
//	HostAlloc     x       -              -                  -       x         x         -           -
//	DeviceVMM     x       -              x                  -       x         x         -           -
//	DeviceMalloc  x       -              x                  -       x         x         -           -
//	Managed       x       -              -                  -       x         x         -           -
//
// Zeroer clears with the CPU on host memory and, on device and managed memory, with a
// cuMemsetD8Async on a non-blocking stream the provider keeps for its clears, synchronized
// (never the legacy stream, which a capture on a blocking stream makes unusable); the
// provider's ReleaseKept (arena.KeptReleaser), which Arena.Close calls, destroys those streams.
// A stream whose wait failed is never cleared on again: destroyed, or, where the driver refuses,
// kept aside for ReleaseKept.
// Only the device providers suggest a capacity (DefaultDeviceShare of the free memory);
// HostVMM and HostRegister, which place their memory on a NUMA node, report it (Placer).
// HostRegister alone prefaults on the arena's workers and joins registrations, since a copy
// must lie inside one registration.
// No CUDA provider has a fixed capacity: that is the external region's (arena).
//
// Every provider takes an open *cuda.Device (cuda.Open reports cuda.ErrNoDriver on a machine
// without a driver) and never closes it: the caller keeps it open until every arena over the
// provider is closed (OpenHost is the exception: its provider owns the device it opened, and
// Close gives it back; a Close whose release of it the driver refuses keeps it, and a later
// Close releases it). Every driver resource a provider holds is counted (Counters), so tests
// can prove that closing an arena leaves nothing behind. Errors wrap the arena's sentinels
// (arena.ErrReserve, arena.ErrCommit, arena.ErrInvalid; arena.ErrExhausted when the driver is
// out of memory) and the driver's error. A refusal to give memory back (a decommit's or a
// release's cuMemUnmap, cuMemRelease, cuMemHostUnregister, cuMemAddressFree, cuMemFree,
// cuMemFreeHost) wraps arena.ErrCommit too, through arena.GiveBackRefused, and says "arena:
// cannot give memory back"; never arena.ErrInvalid, which a Release of a region released
// already, or not the provider's, returns. arena.ErrInvalid says the caller's mistake alone: the
// driver's refusal of work asked correctly never wraps it. A clear refused before anything was
// queued (its stream's cuStreamCreate, its cuMemsetD8Async) wraps arena.ErrNotStarted; a clear
// whose wait failed, a refused cuStreamDestroy of a clear's stream, and a Managed Prefetch or
// Advise the driver refuses for another reason than its arguments (its sticky error, a capture),
// pinmalloc.ErrRefused; each arena.ErrExhausted too when the driver is out of memory.
//
// # Beside a user's capture
//
// Every provider method and shared-memory function that allocates, maps, clears or frees memory
// runs its driver calls on a locked OS thread in the RELAXED capture interaction mode
// (cuThreadExchangeStreamCaptureMode), restored after. Those calls are "potentially unsafe":
// in the default GLOBAL mode the driver refuses them (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
// while any thread captures a stream in GLOBAL mode, and invalidates that capture. They come
// from the arena's purge and commit workers, a pool's purger, or an Alloc that needs memory,
// never as part of the user's graph, so a program capturing CUDA graphs (GLOBAL is the default
// of cudaStreamBeginCapture's callers, PyTorch's among them) keeps its captures, and the pool
// its memory (TestFakeProvidersBesideCapture, TestFakeZeroBesideBlockingCapture).
package cudamem
