package fence

// Release stores v at p with release order: every store before it in program order is visible
// to a goroutine that sees v. On amd64 it is a plain store, and that is a choice (measured
// below), not something the Go memory model gives.
//
// What it orders: the writes a fast section made (the pool's and the heap's metadata, a
// driver call's effects, all in this process's memory, none shared with another process)
// before the store that tells a slow side, which loads p atomically, that the section is over
// (pinned's inside flags, heap's freeSeq, internal/cuda's exit counts). The store needs only
// to stay after those writes, on two levels:
//   - The CPU: amd64 is TSO; a store is never reordered with an earlier store, so every
//     store is a release store (what sync/atomic's Store adds, XCHG, is a full barrier, for
//     the store-to-load order that the fast paths take from Heavy instead).
//   - The compiler: to the memory model a plain store racing with the slow side's atomic load
//     orders nothing; gc keeps it after the earlier stores because in its SSA form every
//     store, load and atomic takes and returns the memory state, so none moves across
//     another, and dead-store elimination drops a store only where a later one to the same
//     address shadows it with no memory read between (an atomic load is one).
//
// The alternative, atomic.StoreUint32, costs a drained store buffer on every section: on the
// 2-vCPU Xeon VM, BenchmarkSectionRelease 1.7 ns against BenchmarkSectionAtomicStore 9.4 ns,
// and pinned's BenchmarkPoolPair (two sections) 22 ns against 42 to 46 ns, double; a store
// in an assembly function, which no compiler reorders across, was 30 ns at best. Under the
// race detector the fast paths are off (Available is false) and their stores are atomic
// (heap's ownerStore).
func Release(p *uint32, v uint32) { *p = v }
