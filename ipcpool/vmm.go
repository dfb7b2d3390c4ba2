package ipcpool

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/cudamem"
)

// A VMM pool (Options.VMM): each region is one exportable allocation of CUDA host granules
// (cudamem.HostExport), made by the owner at the host NUMA node nearest its device and
// passed to the other processes as a file descriptor; each process imports the regions and
// maps them one after another in one reservation (cudamem.MapHostExports), so that the pool
// is one range there as a memfd pool is. The driver pins the memory: no mlock, no
// registration.

// mapVMM maps a VMM pool's regions: the owner's exports, or the descriptors imported. What
// it imports is in sp.unreleased until the mapping takes it, so that close releases it.
func (sp *space) mapVMM(cfg spaceConfig) error {
	if cfg.dev == nil {
		return fmt.Errorf("%w: a VMM pool needs a CUDA device in every process (Options.Pool.Backend CUDAHost)", ErrInvalidOptions)
	}
	sp.dev = cfg.dev
	if cfg.exports == nil {
		for i := range sp.regions {
			e, err := cudamem.ImportHostExport(cfg.dev, sp.fds[1+i], sp.regionSize)
			if err != nil {
				return fmt.Errorf("%w: importing region %d: %w", ErrRefused, i, err)
			}
			sp.unreleased = append(sp.unreleased, e)
		}
	}
	exports := sp.unreleased
	sp.unreleased = nil // the mapping takes them, on error too
	m, err := cudamem.MapHostExports(cfg.dev, exports)
	if err != nil {
		sp.vmm = m // nil, or what the driver refused to give back: close tries again
		return fmt.Errorf("%w: mapping the pool's regions: %w", ErrRefused, err)
	}
	sp.vmm, sp.base = m, m.Base()
	// Kept from a forked child (noFork) where the kernel lets it: older kernels refuse
	// MADV_DONTFORK on a mapping of a device (VM_IO) with EINVAL. UNMEASURED: whether the
	// real driver's mappings of host granules are such mappings, and whether it marks them
	// itself.
	if err := noFork(sp.base, sp.poolBytes()); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	return nil
}

// newVMMRegions makes the owner's regions of a VMM pool and their descriptors. On error the
// caller releases the exports and closes the descriptors it got (abandon).
func newVMMRegions(dev *cuda.Device, l layout) (fds []int, exports []*cudamem.HostExport, err error) {
	for range l.regions {
		e, err := cudamem.NewHostExport(dev, l.regionSize)
		if err != nil {
			return fds, exports, fmt.Errorf("%w: making region %d: %w", ErrRefused, len(exports), err)
		}
		exports = append(exports, e)
		fd, err := e.FD()
		if err != nil {
			return fds, exports, fmt.Errorf("%w: exporting region %d: %w", ErrRefused, len(fds), err)
		}
		fds = append(fds, fd)
	}
	return fds, exports, nil
}
