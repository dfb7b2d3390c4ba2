package main

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// unbound is the CPU mask of the thread onOneCPU bound, from before it did; nil when none is
// bound.
var unbound atomic.Pointer[unix.CPUSet]

// unboundCPUs returns the CPU mask the thread onOneCPU bound had before, and its size in
// bytes, for a thread the C loops start from the bound one (bench_unbind in cloops.h); nil
// and 0 when no thread is bound.
func unboundCPUs() (unsafe.Pointer, int) {
	if set := unbound.Load(); set != nil {
		return unsafe.Pointer(set), int(unsafe.Sizeof(*set))
	}
	return nil, 0
}

// onOneCPU locks the calling goroutine to its thread and binds the thread to the CPU it runs
// on now, so that every round of an interleaved comparison (interleave) runs on that one CPU,
// and returns what undoes it. A shared VM's vCPUs need not be alike: on the 2-vCPU machine of
// issue 29 one ran the heap's 64 B pair in 11 ns and the other in 20 ns, so a comparison whose
// rounds moved between them measured the vCPUs as much as the allocators. Goroutines a case
// starts (mixed/2g, prodcons) run where the scheduler puts them, and so do the threads the C
// loops start from this one (unboundCPUs). Where the affinity cannot be read or set, it only
// locks the thread.
func onOneCPU() (undo func()) {
	runtime.LockOSThread()
	var old unix.CPUSet
	if unix.SchedGetaffinity(0, &old) != nil {
		return runtime.UnlockOSThread
	}
	var c, node uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&c)), uintptr(unsafe.Pointer(&node)), 0); errno != 0 {
		return runtime.UnlockOSThread
	}
	var one unix.CPUSet
	one.Set(int(c))
	if unix.SchedSetaffinity(0, &one) != nil {
		return runtime.UnlockOSThread
	}
	unbound.Store(&old)
	return func() {
		unbound.Store(nil)
		_ = unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
}
