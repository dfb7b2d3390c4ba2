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
// been collected (waiting a little for the cleanup that says so to run).
func Watch(b []byte) func() bool {
	var gone atomic.Bool
	runtime.AddCleanup(&b[0], func(g *atomic.Bool) { g.Store(true) }, &gone)
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
