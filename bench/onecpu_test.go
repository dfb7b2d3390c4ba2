//go:build cgo && linux

package main

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProdconsConsumerNotBound checks that the C producer/consumer case's consumer thread runs
// where the scheduler puts it, as the Go loops' consumer goroutine does, and not on the one CPU
// interleave binds its caller, the producer, to (onOneCPU): a thread inherits its creator's
// affinity, which left the C allocators' producer and consumer taking turns on one CPU while
// pinmalloc's ran on two.
func TestProdconsConsumerNotBound(t *testing.T) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil || all.Count() < 2 {
		t.Skipf("needs 2 CPUs to run on (%d, %v)", all.Count(), err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	undo := onOneCPU()
	defer undo()
	var one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &one); err != nil || one.Count() != 1 {
		t.Fatalf("onOneCPU left the thread on %d CPUs (%v), want 1", one.Count(), err)
	}
	if got := cProdconsConsumerCPUs(mixedOps()); got != all.Count() {
		t.Errorf("the C consumer may run on %d CPUs, want the process's %d", got, all.Count())
	}
}
