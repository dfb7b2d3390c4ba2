// Package streamcheck is a model checker for stream order: it drives a device.Heap, a
// pinned.Pool (CUDAHost backend) and a uvm.Tier sharing that heap, all on the fake CUDA driver
// (internal/fakecuda, whose streams run their work late: at a synchronize, a query that finds it
// pending, Complete), with long random sequences of operations on several non-blocking streams,
// and checks every byte of every device block, pool buffer and tier block against a reference
// model at each synchronize.
//
// # The model
//
// For each object the model keeps the bytes it must hold once every stream has run the work
// queued so far (work is applied to the model when it is queued, in each stream's order), and
// the stream that may still have work on it (busy), or none (idle). A synchronize of stream k
// makes the objects busy on k idle; Complete makes every object idle. At each synchronize every
// idle pool buffer and every idle device block is compared with the model; a tier block is
// compared whenever it is acquired for reading (a pageable DtoHAsync on the acquiring stream,
// which returns once the stream has run everything before it), read on the host (AcquireHost)
// and at the end. A fresh block or buffer of a ZeroOnFree heap or pool must read zero (the
// fake's new memory is zero, and everything freed is scrubbed). Memory that changes owner
// before its streams have passed it shows as a late copy landing on another object.
//
// Errors the APIs return for legitimate operations fail the run, except refusals the model
// cannot predict exactly, each checked to have changed nothing (the bytes are checked after):
//
//   - device out of memory (fragmentation), which must not happen while the heap holds no
//     user block and no acquired tier block;
//   - the tier's ErrAllPinned and ErrHostFull, and its VRAM refused by the shared heap (out of
//     memory, or the heap's quota, which the user's blocks and the tier's VRAM share);
//   - quota refusals while Hold keeps streams from passing: the device's may count the frees
//     whose streams have not passed, the pool's the buffers its own Stats reports deferred
//     (it records a stream's event lazily, behind later work). With Hold off a quota must
//     refuse exactly what the live bytes leave no room for: a deferred free whose stream has
//     run is not live (and the device's quota may count the tier's VRAM);
//   - device.Heap.ForgetStream's heap.ErrLiveBlocks for a stream one of whose blocks was
//     freed on another stream since the heap last waited for every deferred free (it counts
//     as live until the heap polls that other stream: the stream is then kept).
//
// Misuse the model knows to be invalid (double frees, sub-slices, copies past a block's end,
// a copy from a freed block, Release on the wrong stream or of a block not acquired,
// ForgetStream of a stream with live blocks or acquired tier blocks, use after Close) must
// return its sentinel (errors.Is) and change nothing.
//
// # The contract the model assumes (the misuse it never generates)
//
// The generator is a well-behaved user; it never does what is the caller's fault:
//
//   - A device block or pool buffer with work queued on stream a is touched by work on another
//     stream b only after a has been synchronized: nothing orders a's work before b's. (The pool
//     orders its own reuse after every stream recorded on a buffer; that is a free, not a use.)
//   - A device block is freed with the synchronous device.Heap.Free only when no stream has
//     work on it; FreeAsync on another stream than its work's only when it is idle. A block
//     its owner has queued nothing on since its Alloc is freed either way at once: with
//     ZeroOnFree the heap orders the free's memset after the block's stream, where a block
//     freed and taken again at once may still have its old owner's work queued (DevReuseFree,
//     a hand-over the generator puts in place of one operation in 64: a copy out of the
//     block held late, the free on its stream, the Alloc that takes it, the free elsewhere,
//     that stream run first, and the old owner's copy checked).
//   - A pool buffer is not written by the CPU while a copy from or into it is queued; a copy
//     made with another binding (the raw driver) is followed by RecordStream before any free,
//     or by FreeAsync on a stream whose later work runs after the copy's: its own, or through
//     the legacy default stream's implicit order (PoolRawFree).
//   - A tier block acquired on stream a is acquired on stream b only after a has been
//     synchronized (the tier orders its own moves after Release's event, not user work on a
//     before user work on b); its device address is used only on the acquiring stream.
//   - A stream is synchronized, and ForgetStream'd by the heap, the tier and the pool (when the
//     pool has ForgetStream), before it is destroyed.
//   - Buffers the tier hands out with AcquireHost are used only until ReleaseHost.
//
// # Profiles
//
// Bits of a seed ask for profiles, each drawn apart so that a seed without them draws what it
// always drew (random seeds have each bit half the time): LegacyMix (some streams blocking, the
// legacy default stream in use, frees ordered by it alone), DevicePressure (a 4 MiB heap kept
// full by allocations beyond a segment and same-stream frees, each with a scrub queued: the
// conditions under which a heap that gives memory away behind its stream is seen) and
// HostPressure (the tier's host buffers from a pool of their own with a tight quota: evictions
// and host acquisitions meet a full pool, and the tier drops host copies, some under restores
// Hold keeps queued).
//
// # Proven by mutants
//
// mutants_test.go lists ordering bugs put back into the module, one edit each: every bug the
// checker was first tried on, every ordering bug fixed since, and the wait of each path where
// memory changes owner (a free, trim, reclaim, purge, drain, forget, a hold's last release, a
// parked free, a staging buffer reused) taken out or weakened. TestMutants builds them with
// go build's -overlay (the tree is not touched), every mutant a package's tests catch in one
// binary that runs one of them at a time, and runs the CI run of the checker on each, which
// must fail (or, for the few the checker's runs do not reach, the case of the mutated package
// that catches it); TestMutantsApply checks that every edit still applies.
//
// # Running it
//
// go test ./internal/streamcheck runs a few fixed seeds of a few thousand steps each (some seconds
// on a 2-core machine), then TestRegressions replays every sequence a failure was shrunk to, and a
// fast subset of the mutants. PINMALLOC_LONG=1 (CI's run) runs the fixed seeds four times as long,
// adds 8 seeds of 50,000 steps (every combination of the profiles) and builds and runs every
// mutant, each until its first failure (80 s on a quiet 2-core machine).
// Flags (or the environment variables in parentheses, which the child process fakecuda.Run starts
// inherits; it passes no flags of its own):
//
//	-seed N      (STREAMCHECK_SEED)     run this seed only
//	-steps N     (STREAMCHECK_STEPS)    operations per seed
//	-seeds N     (STREAMCHECK_SEEDS)    N random seeds instead of the fixed ones
//	-long D      (STREAMCHECK_DURATION) random seeds until D has passed (give -timeout above D)
//	-shrink D    (STREAMCHECK_SHRINK)   time to spend shrinking a failure (default 30s; a
//	                                    failure thousands of operations deep may need minutes)
//
// For example go test ./internal/streamcheck -run TestStreamOrder -long 30m -timeout 40m, or
// -seeds 20 -steps 100000. A failure prints its seed, the configuration, and the shortest
// sequence of operations delta debugging found that fails the same way (each candidate
// replayed on a fresh heap, pool and tier), as a readable list and as a regression case for
// regressions_test.go. Configurations with one pool shard and no timed purge replay
// deterministically; the others (a shard per P, a 1 ms purge) may not shrink. The same runs
// under -race and with -tags invariants (go test -race -tags invariants ./internal/streamcheck).
package streamcheck
