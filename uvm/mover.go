package uvm

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// CopyJob is one copy of Len bytes from Src to Dst, both addresses the device can use. It is
// device.CopyJob, so that *device.Batcher is a Mover as it is.
type CopyJob = device.CopyJob

// newDefaultMover returns the copy engine a tier uses when Options.Mover is nil: a
// device.Batcher of MethodAuto, which times the gather kernel, cuMemcpyBatchAsync and one copy
// per block on the device once per process and picks the fastest for each batch by its block
// size and length (the tier's batches are launches of 128 to 1024 blocks). The tier's jobs never
// overlap (every block has its own VRAM and its own host buffer, and a batch moves a block
// once), so the Batcher's overlap check is skipped.
func newDefaultMover(dev *cuda.Device) (*device.Batcher, error) {
	return device.NewBatcher(dev, device.BatchOptions{TrustNoOverlap: true})
}

// Mover queues batches of copies on a stream and returns without waiting for them. Every
// address of a job is one the device can use: device memory, or pinned host memory through its
// device address. *device.Batcher satisfies it (one kernel launch per batch).
//
// When Copy fails, the tier treats every job of the batch as not done: the blocks stay where
// they were. A Mover may have queued some of the jobs before failing; the tier never reads
// their destinations before they are copied again.
type Mover interface {
	Copy(jobs []CopyJob, s cuda.Stream) error
}

// perJobMover queues one cuMemcpyAsync per job: the fallback when no batched copy engine is
// available.
type perJobMover struct{ dev *icuda.Device }

// Copy implements Mover.
func (m perJobMover) Copy(jobs []CopyJob, s cuda.Stream) error {
	for i, j := range jobs {
		if err := m.dev.MemcpyAsync(j.Dst, j.Src, j.Len, s); err != nil {
			return fmt.Errorf("uvm: copy %d of %d (%d bytes, %#x to %#x): %w", i+1, len(jobs), j.Len, j.Src, j.Dst, err)
		}
	}
	return nil
}

// PerJobMover returns a Mover that queues one cuMemcpyAsync per job on dev.
func PerJobMover(dev *cuda.Device) (Mover, error) {
	d, err := icuda.Internal(dev)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return perJobMover{dev: d}, nil
}
