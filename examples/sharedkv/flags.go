package main

import "fmt"

// The bounds of the flags: the store's values must fit the 8 MiB pool (poolOptions) and its
// 2048 shared buffers beside the 3 MiB batch memoryFlowsBack has worker 1 write.
const (
	minValue   = 2 << 10  // below it the batch alone takes most of the shared buffers
	maxValue   = 64 << 10 // above it a few values fill a 2 MiB grant
	liveValues = 2 << 20  // -keys × -value: a quarter of the pool, beside the batch's 3 MiB
	batchBytes = 3 << 20  // memoryFlowsBack's batch: more than one grant
	exports    = 2048     // poolOptions' Exports
)

// checkFlags says which flag is out of the range the demonstration can run with, and what it
// can be, or returns nil.
func checkFlags(valueSize, ops, keys int) error {
	if valueSize < minValue || valueSize > maxValue {
		return fmt.Errorf("-value %d: want %d to %d bytes (the values live in an 8 MiB pool shared by four workers)",
			valueSize, minValue, maxValue)
	}
	// The index's values, the batch's and a few more in flight (the prefix, old versions being
	// let go) are shared buffers at once.
	maxKeys := min(liveValues/valueSize, exports-batchBytes/valueSize-16)
	if keys < 1 || keys > maxKeys {
		return fmt.Errorf("-keys %d: want 1 to %d with -value %d (at most %d KiB of values live, %d shared buffers in all)",
			keys, maxKeys, valueSize, liveValues>>10, exports)
	}
	if ops < 0 {
		return fmt.Errorf("-ops %d: want 0 or more", ops)
	}
	return nil
}
