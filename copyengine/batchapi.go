package copyengine

// MethodBatchAPI: one cuMemcpyBatchAsync_v2 call per batch (CUDA 13.0 drivers), on the copy
// engines.

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// batch queues jobs with one cuMemcpyBatchAsync_v2 call.
func (b *Batcher) batch(jobs []Job, s cuda.Stream) error {
	b.dsts, b.srcs, b.sizes = b.dsts[:0], b.srcs[:0], b.sizes[:0]
	for _, j := range jobs {
		b.dsts = append(b.dsts, uintptr(j.Dst))
		b.srcs = append(b.srcs, uintptr(j.Src))
		b.sizes = append(b.sizes, uintptr(j.Len))
	}
	on := s
	if s == 0 || s == 1 {
		// The batch API refuses the legacy stream (0, or CU_STREAM_LEGACY): fence through a
		// side stream.
		if b.side == 0 {
			side, err := b.dev.StreamCreate(true)
			if err != nil {
				return fmt.Errorf("copyengine: batch copy on the legacy stream: %w", err)
			}
			b.side = side
		}
		if err := b.fence(s, cuda.Stream(b.side)); err != nil {
			return err
		}
		on = cuda.Stream(b.side)
	}
	if err := b.dev.MemcpyBatchAsync(b.dsts, b.srcs, b.sizes, 0, uintptr(on)); err != nil {
		return fmt.Errorf("copyengine: batch copy of %d jobs: %w", len(jobs), err)
	}
	if on != s {
		if err := b.fence(on, s); err != nil {
			return b.settle(on, s, err)
		}
	}
	return nil
}
