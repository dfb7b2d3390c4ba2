package main

import (
	"os"
	"runtime"
	"syscall"
)

// offMainThread runs f on a thread other than the process's first one (locked to it), and
// returns when f has. glibc's main arena, the first thread's, is the only one malloc_trim
// shrinks to nothing: a footprint case whose calling thread was the first took its baseline
// (trimmed) and then, starting its threads, grew that arena by 132 KiB (pthread_create
// allocates a thread's TLS on the calling thread), which the case's figures counted
// (TestCFootprintNoLateThreadArena). Holding the first thread may start another for f: f
// waits for it to run (threadsStarted) before its baseline.
func offMainThread(f func()) {
	done := make(chan struct{})
	run := func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		f()
		close(done)
	}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if syscall.Gettid() != os.Getpid() {
			run()
			return
		}
		go run() // on another thread: this goroutine holds the first one until f is done
		<-done
	}()
	<-done
}
