// Package gcwatch tells tests whether Go memory has been collected: the check that memory
// handed to an allocator as a uintptr (an External region, a buffer the driver copies) is kept
// alive for as long as it is used.
package gcwatch

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Watch returns a function that runs the garbage collector and reports whether b's memory has
// been collected (waiting a little for the cleanup that says so to run). b may be of length 0
// but not of capacity 0: that has no memory to watch, and Watch panics.
func Watch(b []byte) func() bool {
	if cap(b) == 0 {
		panic("gcwatch: Watch of a slice of capacity 0, which has no memory")
	}
	var gone atomic.Bool
	runtime.AddCleanup(&b[:1][0], func(g *atomic.Bool) { g.Store(true) }, &gone)
	return func() bool {
		for range 20 {
			runtime.GC()
			if gone.Load() {
				return true
			}
			time.Sleep(time.Millisecond)
		}
		return false
	}
}
