//go:build !linux

package main

import (
	"runtime"
	"unsafe"
)

// onOneCPU locks the calling goroutine to its thread (see onecpu_linux.go: binding the thread
// to one CPU is Linux's here) and returns what undoes it.
func onOneCPU() (undo func()) {
	runtime.LockOSThread()
	return runtime.UnlockOSThread
}

// unboundCPUs is nil and 0: no thread is bound here.
func unboundCPUs() (unsafe.Pointer, int) { return nil, 0 }
