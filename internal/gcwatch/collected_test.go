package gcwatch

import "testing"

// watchDropped watches memory that nothing references once it returns.
//
//go:noinline
func watchDropped() func() bool { return Watch(make([]byte, 1<<20)) }

// TestWatchSeesCollection: memory no longer referenced is reported collected, so that a test
// whose region was dropped too early can fail.
func TestWatchSeesCollection(t *testing.T) {
	for range 3 {
		if !watchDropped()() {
			t.Fatal("memory referenced by nothing was never reported collected")
		}
	}
}
