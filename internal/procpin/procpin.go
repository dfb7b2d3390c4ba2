//go:build !pinmalloc_noprocpin

// Package procpin tells a goroutine which processor (P, in the Go scheduler's terms) it runs
// on, so that a goroutine-safe allocator can keep one heap per P, as mimalloc keeps one per
// thread: goroutines on one P run one at a time, so they rarely contend for its heap.
//
// It reaches the runtime's procPin and procUnpin through go:linkname (the runtime keeps them
// reachable for the packages that use them; sync.Pool is built on them). The answer is a hint:
// the goroutine may move to another P as soon as ID returns, so callers still take a lock to
// own what they index with it. Build with the tag pinmalloc_noprocpin to do without the
// runtime's internals: ID then returns a number cached per P by a sync.Pool, which spreads
// goroutines over heaps as well but costs a few nanoseconds more.
package procpin

import _ "unsafe" // go:linkname

//go:linkname runtimeProcPin runtime.procPin
func runtimeProcPin() int

//go:linkname runtimeProcUnpin runtime.procUnpin
func runtimeProcUnpin()

// ID returns the number of the P the calling goroutine runs on, from 0 to GOMAXPROCS-1.
func ID() int {
	id := runtimeProcPin()
	runtimeProcUnpin()
	return id
}
