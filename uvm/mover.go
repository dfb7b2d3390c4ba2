package uvm

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/copyengine"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// The copy engine: the Mover interface the tier moves its batches through, the Mover a tier makes
// for itself (a calibrated copyengine.Batcher), PerJobMover (the Batcher's per-copy path), and the
// Tier's engine part: the mover, the tier's two streams and its events.

// CopyJob is one copy of Len bytes from Src to Dst, both addresses the device can use. It is
// copyengine.Job, so that *copyengine.Batcher is a Mover as it is.
type CopyJob = copyengine.Job

// Mover queues batches of copies on a stream and returns without waiting for them. Every
// address of a job is one the device can use: device memory, or pinned host memory through its
// device address. *copyengine.Batcher satisfies it (per batch: one launch of its gather kernel, one
// cuMemcpyBatchAsync call, or one copy per job).
//
// Copy must not use jobs after it returns: the tier reuses the slice for its next launch (the
// jobs' addresses stay the tier's until s has passed the copies). When Copy fails, the tier
// treats every job of the batch as not done: the blocks stay where they were. A Mover may have
// queued some of the jobs before failing; the tier never reads their destinations before they
// are copied again.
type Mover interface {
	Copy(jobs []CopyJob, s cuda.Stream) error
}

// newDefaultMover returns the copy engine a tier uses when Options.Mover is nil: a
// copyengine.Batcher of MethodAuto, which times the gather kernel, cuMemcpyBatchAsync and one copy
// per block on the device once per process and picks the fastest for each batch by its block
// size and length (the tier's batches are launches of 128 to 1024 blocks). The tier's jobs never
// overlap (every block has its own VRAM and its own host buffer, and a batch moves a block
// once), so the Batcher's overlap check is skipped.
func newDefaultMover(dev *cuda.Device) (*copyengine.Batcher, error) {
	return copyengine.New(dev, copyengine.Options{TrustNoOverlap: true})
}

// PerJobMover returns a Mover that queues one cuMemcpyAsync per job on dev: a copyengine.Batcher
// forced to copyengine.MethodPerCopy, whose errors name the failing job (0-based) and leave the
// jobs before it queued. Such a Batcher holds no driver resource (no kernel, no staging buffer,
// no stream), so it needs no Close. Like the tier's own Batcher it trusts that the jobs of a
// batch do not overlap (copyengine.Options.TrustNoOverlap); it still refuses an invalid job
// (copyengine.ErrInvalidJob).
func PerJobMover(dev *cuda.Device) (Mover, error) {
	b, err := copyengine.New(dev, copyengine.Options{Method: copyengine.MethodPerCopy, TrustNoOverlap: true})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return b, nil
}

// engine is how the tier moves bytes: the mover, and the tier's two streams, one per direction
// (restores on h2d, evictions on d2h), with the pool of the events it records on them (its
// batches' and its release events). Fixed by New.
type engine struct {
	mover    Mover
	ownMover interface{ Close() error } // the mover, when New made it: Close closes it
	h2d, d2h cuda.Stream
	events   *icuda.EventPool
}

// stream returns the tier's stream of direction dir (dirH2D or dirD2H).
func (e *engine) stream(dir int) cuda.Stream {
	if dir == dirD2H {
		return e.d2h
	}
	return e.h2d
}
