package main

import "fmt"

// The bounds of the flags: the buffers fit an int and the goroutines and the queue a process.
const (
	maxChunk   = 1 << 30 // -chunk
	maxWorkers = 1024    // -workers
	maxQueue   = 1024    // -inflight
)

// flagError is a flag out of its range: main exits 2 on it, as flag does on a bad flag.
type flagError struct{ error }

// checkFlags says which flag is out of the range the example can run with, and what it can
// be, or returns nil.
func checkFlags(size int64, chunk, workers, inFlight int) error {
	switch {
	case chunk < 4096 || chunk > maxChunk || chunk%4096 != 0:
		return flagError{fmt.Errorf("-chunk %d: want a multiple of 4096 from 4096 to %d (O_DIRECT reads whole pages)", chunk, maxChunk)}
	case workers < 1 || workers > maxWorkers:
		return flagError{fmt.Errorf("-workers %d: want 1 to %d", workers, maxWorkers)}
	case inFlight < 1 || inFlight > maxQueue:
		return flagError{fmt.Errorf("-inflight %d: want 1 to %d", inFlight, maxQueue)}
	case size < 0:
		return flagError{fmt.Errorf("-size %d: want 0 or more", size)}
	}
	return nil
}
