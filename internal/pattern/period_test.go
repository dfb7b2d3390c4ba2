package pattern

import (
	"strings"
	"testing"
	"time"
)

// TestFillRefusesPeriodBelowOne: a period of 0 made Fill double an empty prefix forever, and a
// negative one sliced out of range; both are a caller's bug, told by a panic naming it.
func TestFillRefusesPeriodBelowOne(t *testing.T) {
	for _, period := range []int{0, -1} {
		done := make(chan any, 1)
		go func() {
			defer func() { done <- recover() }()
			Fill(make([]byte, 8), period, func(int) byte { return 1 })
		}()
		select {
		case r := <-done:
			if s, ok := r.(string); !ok || !strings.Contains(s, "period") {
				t.Errorf("Fill with period %d panicked with %v, want a message naming it",
					period, r)
			}
		case <-time.After(10 * time.Second): // a watchdog, not a synchronization
			t.Fatalf("Fill with period %d did not return", period)
		}
	}
}
