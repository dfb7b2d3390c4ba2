// Package pinned allocates page-locked []byte buffers that the Go garbage collector never scans,
// moves or frees: staging buffers for DMA and GPU copies, I/O buffers, memory that must not be
// swapped.
//
// # Use
//
//	pool, err := pinned.New(pinned.Options{}) // mmap+mlock memory (Backend Locked)
//	if err != nil {
//		return err
//	}
//	defer pool.Close()
//	buf, err := pool.Alloc(1 << 20) // a []byte of 1 MiB, page-locked; contents undefined
//	if errors.Is(err, pinned.ErrMemlock) {
//		// raise ulimit -l, or use Backend Pageable
//	}
//	...
//	err = pool.Free(buf) // the slice Alloc returned; a double free is an error, not a crash
//
// Options.Backend picks the memory: CUDAHost for buffers the GPU copies at full speed (with
// FreeAsync and RecordStream to order frees after the streams that use them), Pageable where
// nothing may be locked, Auto for CUDAHost where a GPU is and Locked elsewhere. pool.Usage()
// and pool.Stats() say what the pool holds.
//
// A Pool is goroutine-safe: any goroutine may allocate, and any goroutine may free any buffer.
// Buffers come from a mimalloc-style heap (package heap) over an arena of locked host memory
// (mmap + mlock) by default, so allocation and free cost nanoseconds and make no system call in
// steady state, where mmap+mlock per buffer costs microseconds and cudaHostAlloc with its free
// 3 µs at 4 KiB to 10 ms at 16 MiB (an H200: bench/results/nvidia-h200.md).
//
// # Streams
//
// The CUDA driver copies the memory of a CUDAHost pool asynchronously: a copy queued on a
// stream reads or writes the buffer after the call that queued it. Such a pool hands a buffer
// out again only once every stream that may still use it has passed its free: FreeAsync frees
// in a stream's order, RecordStream marks a buffer as used by a stream (device.Heap's
// HtoDAsync and DtoHAsync do it themselves), and Free of a marked buffer waits for its streams.
// No CPU waits for them: the buffer comes back at a later allocation. ForgetStream, called
// before a stream is destroyed, waits for it and forgets it. Other pools' memory is
// copied by the driver as pageable memory, before the call returns, so their FreeAsync frees at
// once.
//
// # Reslicing and append
//
// A buffer may be resliced from its start, as I/O code does (buf = buf[:nread]), and freed so:
// Free and FreeAsync take the buffer's start and capacity, and free all of it. A slice that
// starts elsewhere (buf[16:]) or whose capacity was cut (buf[:n:n]) is not a buffer, and is
// refused with ErrSubSlice. append within the capacity writes the pinned buffer; append past
// the capacity copies the contents to a new array of Go memory, not pinned, which Free refuses
// (ErrNotOwned): keep the slice Alloc returned (or one resliced from it) to free, and size the
// buffer for what it must hold.
//
// # Errors
//
// Every error wraps a sentinel of this package (equal to the heap's or arena's, so errors.Is
// works with either): bad sizes, double frees, foreign pointers and sub-slices are reported,
// never acted on, and leave the pool usable.
//
// # How it scales
//
// The pool keeps one heap shard per processor (P, in the Go scheduler's terms), made when a
// goroutine first allocates there: mimalloc's heap per thread, with Ps in place of threads.
// Alloc and Free run in a fast section: the goroutine pins itself to its P (internal/procpin),
// which makes it the only code running there, marks the P's shard entered with a plain store
// and checks that no holder has revoked it, then runs the heap's non-blocking paths
// (heap.Heap.TryAlloc and TryFree) and unpins. No lock and no atomic read-modify-write but the
// free's own compare-and-swap (and a kept object page's claim): a free of a block of the P's
// shard goes straight back on its page, or keeps its object page or huge object for the next
// request of its size; a class block of another shard takes the heap's lock-free remote path.
//
// What may block (a new page or segment from the arena, a new or purged object page or huge
// object, aligned requests, a large buffer of another shard) runs as the shard's holder: its
// mutex, taken while pinned to its P so that no fast section can be under way, with the fast
// sections revoked until it is done. Maintenance
// (Stats, Usage, Trim, Close, the observers) holds shards from any goroutine: it revokes them,
// makes every thread pass a memory barrier (internal/fence: one membarrier system call), and
// waits for the fast sections under way to end. Meanwhile the shard's fast sections refuse, and
// a goroutine of its P waits a while for it on the blocking path, then takes a spill shard, a
// heap only holders use.
//
// Where memory commits 2 MiB at a time (CUDAHost over VMM host memory), buffers above 64 KiB
// go to one more shard shared by the Ps, the big shard, when no other goroutine holds it, so
// that the chunks they fill are shared as one shard's would be; a large request that finds it
// held takes the P's shard as before, and never waits for it. The P whose goroutines alone
// used it for a while gets fast sections there (a biased lock), until a goroutine of another
// P takes it: a large pair costs what it does in the P's own shard. The other shards' class pages
// (the buffers up to 64 KiB) take their room in the big shard's chunks too, when it is free
// at the moment a shard makes a page: the pages stay their shard's, for its fast sections.
//
// Builds where fast sections cannot be trusted — the race detector (which cannot see the
// barrier's ordering), the pinmalloc_noprocpin tag, a kernel without membarrier — and pools
// with fewer shards than Ps (Options.Shards) take the holder path every time: a TryLock of the
// P's shard, as before the fast path existed.
package pinned
