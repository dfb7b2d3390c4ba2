package gcwatch

import (
	"runtime"
	"strings"
	"testing"
)

// TestWatchEmpty: a slice of length 0 still has memory when its capacity is not 0, and Watch
// watches it (it indexed b[0] and panicked); one of capacity 0 has none, which Watch says.
func TestWatchEmpty(t *testing.T) {
	b := make([]byte, 0, 1<<20) // on the heap: too large for the stack
	collected := Watch(b)
	if collected() {
		t.Error("memory still referenced was collected")
	}
	runtime.KeepAlive(b)
	defer func() {
		if s, ok := recover().(string); !ok || !strings.Contains(s, "gcwatch") {
			t.Errorf("Watch(nil) panicked with %v, want gcwatch's message", s)
		}
	}()
	Watch(nil)
}
