package arena

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// noFork marks the whole mapping of r, a region a host provider has just mapped, MADV_DONTFORK:
// a child forked without exec (by C code through cgo, say) gets nothing mapped there. Without
// the mark the child would share the region's pages copy-on-write: the parent's next write to a
// page copies it (the DMA of a registration, on kernels that do not copy pinned pages at fork,
// then reaches a page the parent no longer sees), and locked memory is charged to both. It costs
// one madvise per region, at Reserve; the mark stays on every piece of the mapping that a later
// mprotect splits off. A mapping whose type refuses the advice (EINVAL) is left as it was.
func (h *HostProvider) noFork(r *Region) error {
	hr := r.Handle.(*hostRegion)
	b := bytesAt(hr.mapBase, hr.mapSize)
	h.madvise.Add(1)
	var err error
	if h.noForkFn != nil {
		err = h.noForkFn(b)
	} else {
		err = unix.Madvise(b, unix.MADV_DONTFORK)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w: keeping %d bytes from a forked child (madvise(DONTFORK)): %w",
			ErrReserve, hr.mapSize, err)
	}
	return nil
}
