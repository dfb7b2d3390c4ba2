//go:build !pinmalloc_noprocpin

// Package procpin tells a goroutine which processor (P, in the Go scheduler's terms) it runs
// on, so that a goroutine-safe allocator can keep one heap per P, as mimalloc keeps one per
// thread: goroutines on one P run one at a time, so they rarely contend for its heap. Pin and
// Unpin hold the goroutine on its P for a short section that must not block, in which it is
// the P's only runner.
//
// It reaches the runtime's procPin and procUnpin through go:linkname (the runtime keeps them
// reachable for the packages that use them; sync.Pool is built on them). The answer is a hint:
// the goroutine may move to another P as soon as ID returns, so callers still take a lock to
// own what they index with it, or pin. Build with the tag pinmalloc_noprocpin to do without the
// runtime's internals: ID then returns a number cached per P by a sync.Pool, which spreads
// goroutines over heaps as well but costs a few nanoseconds more.
package procpin

import _ "unsafe" // go:linkname

//go:linkname runtimeProcPin runtime.procPin
func runtimeProcPin() int

//go:linkname runtimeProcUnpin runtime.procUnpin
func runtimeProcUnpin()

// Exact reports that ID and Pin return the P's own number, unique among the running Ps: a
// goroutine pinned to P i is then the only one that can run code pinned to P i until it
// unpins, which a front may use to own per-P state without a lock.
const Exact = true

// ID returns the number of the P the calling goroutine runs on, from 0 to GOMAXPROCS-1.
func ID() int {
	id := runtimeProcPin()
	runtimeProcUnpin()
	return id
}

// Pin pins the calling goroutine to its P and returns the P's number: until Unpin, the
// goroutine is not preempted and no other goroutine runs on that P. Between Pin and Unpin the
// goroutine must not block (no lock that may wait, no channel, no system call, no sleep):
// the runtime cannot stop the world, or run anything else on the P, until it unpins.
func Pin() int { return runtimeProcPin() }

// Unpin ends what Pin began.
func Unpin() { runtimeProcUnpin() }
