package shared

import "fmt"

// Handle names a buffer of a shared pool in every process attached to it: a small value to
// pass between processes (over any channel: a pipe, a queue, the pool's own memory) that
// Process.Bytes turns back into a []byte mapped in the receiving process.
//
// Gen is the generation of the pool memory under the buffer: it changes each time that
// memory changes owner (a process detaches or dies and its memory is taken back, or is
// granted to another process), so a handle outliving its memory is refused with
// ErrStaleHandle rather than naming another owner's bytes. It does not change when the
// owner frees the buffer and allocates another in its place: as with any buffer, freeing it
// while others still use it is the program's bug.
type Handle struct {
	// Pool is the pool's random identity: a handle of another pool is refused.
	Pool uint64
	// Region is the region (memfd) index, Gen the memory's generation.
	Region, Gen uint32
	// Offset and Length place the buffer in the region.
	Offset, Length uint64
}

// String formats the handle for logs.
func (h Handle) String() string {
	return fmt.Sprintf("pool %016x region %d offset %#x length %d gen %d", h.Pool, h.Region, h.Offset, h.Length, h.Gen)
}
