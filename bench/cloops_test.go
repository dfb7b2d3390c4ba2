//go:build cgo

package main

import "testing"

// TestChurnSlotInC checks that the C loops draw the churn's slots as the Go loops do.
func TestChurnSlotInC(t *testing.T) {
	for _, live := range []uint64{1, 3, 1e4, 1e7} {
		for i := range uint64(10000) {
			if g, c := churnSlot(i, live), cChurnSlot(i, live); g != c || g >= live {
				t.Fatalf("operation %d of %d live: Go slot %d, C slot %d", i, live, g, c)
			}
		}
	}
}
