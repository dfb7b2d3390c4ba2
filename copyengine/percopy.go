package copyengine

// MethodPerCopy: one cuMemcpyAsync per job, what every driver has.

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// perCopy queues one cuMemcpyAsync per job.
func (b *Batcher) perCopy(jobs []Job, s cuda.Stream) error {
	for i, j := range jobs {
		if err := b.dev.MemcpyAsync(uintptr(j.Dst), uintptr(j.Src), uintptr(j.Len), uintptr(s)); err != nil {
			return fmt.Errorf("copyengine: copy job %d of %d (%d bytes from %#x to %#x; earlier jobs are queued): %w",
				i, len(jobs), j.Len, j.Src, j.Dst, err)
		}
	}
	return nil
}
