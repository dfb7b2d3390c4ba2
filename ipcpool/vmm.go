package ipcpool

import (
	"fmt"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// A VMM pool (Options.VMM): each region is one exportable allocation of CUDA host granules,
// made by the owner at the host NUMA node nearest its device and passed to attaching
// processes as a POSIX file descriptor; each process imports it and maps every region one
// after the other in one reservation, with read-write access for the host and its device.
// The driver pins the memory: no mlock, no registration.

// Location types of CU_MEM_LOCATION_TYPE_*.
const (
	locDevice   = 1
	locHost     = 2
	locHostNUMA = 3
)

// vmmSpace is a VMM pool's regions mapped in one process.
type vmmSpace struct {
	d    *icuda.Device
	va   icuda.DevicePtr
	size uintptr
	rs   uintptr
	hs   []icuda.MemHandle // mapped, by region
}

// mapVMM maps a VMM pool's regions: the owner's handles, or the descriptors imported.
func (sp *space) mapVMM(cfg spaceConfig) error {
	if cfg.dev == nil {
		return fmt.Errorf("%w: a VMM pool needs a CUDA device in every process (Pool.Backend CUDAHost)", ErrInvalidOptions)
	}
	d, err := icuda.Of(cfg.dev)
	if err != nil {
		return err
	}
	va, err := d.MemAddressReserve(sp.poolBytes(), mapAlign)
	if err != nil {
		return fmt.Errorf("ipcpool: reserving %d bytes for the pool's granules: %w", sp.poolBytes(), err)
	}
	v := &vmmSpace{d: d, va: va, size: sp.poolBytes(), rs: sp.regionSize}
	sp.vmm, sp.base, sp.dev = v, uintptr(va), d
	locs := []icuda.MemLocation{{Type: locHost}, {Type: locDevice, ID: int32(d.Ordinal())}}
	for i := range sp.regions {
		var h icuda.MemHandle
		if cfg.handles != nil {
			h = cfg.handles[i]
		} else if h, err = d.MemImportFD(sp.fds[1+i]); err != nil {
			return fmt.Errorf("ipcpool: importing region %d's granules: %w", i, err)
		}
		at := va + icuda.DevicePtr(uintptr(i)*sp.regionSize)
		if err := d.MemMap(at, sp.regionSize, h); err != nil {
			if cfg.handles == nil {
				_ = d.MemRelease(h)
			}
			return fmt.Errorf("ipcpool: mapping region %d's granules: %w", i, err)
		}
		v.hs = append(v.hs, h)
		if err := d.MemSetAccessAt(at, sp.regionSize, locs); err != nil {
			return fmt.Errorf("ipcpool: access to region %d's granules: %w", i, err)
		}
	}
	return nil
}

// unmap undoes mapVMM: every mapping, handle and the reservation.
func (v *vmmSpace) unmap() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("ipcpool: unmapping the pool's granules: %w", err)
		}
	}
	for i, h := range v.hs {
		keep(v.d.MemUnmap(v.va+icuda.DevicePtr(uintptr(i)*v.rs), v.rs))
		keep(v.d.MemRelease(h))
	}
	keep(v.d.MemAddressFree(v.va, v.size))
	v.hs = nil
	return first
}

// newVMMRegions makes the owner's regions of a VMM pool: exportable granules at the host NUMA
// node nearest the device (node 0 when the driver does not say), each exported as a file
// descriptor. It returns the descriptors and the handles; on error the caller releases the
// handles and closes the descriptors it got.
func newVMMRegions(d *icuda.Device, l layout) (fds []int, hs []icuda.MemHandle, err error) {
	node, ok := d.HostNUMAID()
	if !ok {
		node = 0
	}
	loc := icuda.MemLocation{Type: locHostNUMA, ID: int32(node)}
	for range l.regions {
		h, err := d.MemCreateExportable(l.regionSize, loc)
		if err != nil {
			return fds, hs, fmt.Errorf("ipcpool: creating %d bytes of exportable host granules: %w", l.regionSize, err)
		}
		hs = append(hs, h)
		fd, err := d.MemExportFD(h)
		if err != nil {
			return fds, hs, fmt.Errorf("ipcpool: exporting a region: %w", err)
		}
		fds = append(fds, fd)
	}
	return fds, hs, nil
}
