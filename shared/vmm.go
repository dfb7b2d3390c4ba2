package shared

import (
	"fmt"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// Backend is the kind of memory a pool is made of.
type Backend uint8

const (
	// Locked: memfds, mapped shared and locked with mlock (the default). No CUDA needed;
	// with a Device, each process registers the regions with its context.
	Locked Backend = iota
	// VMM: CUDA host granules (cuMemCreate at a HOST_NUMA location, created exportable as
	// POSIX file descriptors), which the owner exports and every attached process imports
	// (cuMemImportFromShareableHandle), maps and gives the host and its device access to.
	// Pinned by the driver, no registration; every process needs a Device.
	VMM
)

// Location types of CU_MEM_LOCATION_TYPE_*.
const (
	locDevice   = 1
	locHost     = 2
	locHostNUMA = 3
)

// vmmRegion is a region of a VMM pool in one process: its handle and where it is mapped.
type vmmRegion struct {
	h  icuda.MemHandle
	va icuda.DevicePtr
}

// mapVMM maps a region's physical memory h in this process: a 2 MiB-aligned reservation, the
// mapping, and read-write access for the host and the device.
func (p *Process) mapVMM(d *icuda.Device, h icuda.MemHandle) error {
	va, err := d.MemAddressReserve(p.regionSize, mapAlign)
	if err != nil {
		_ = d.MemRelease(h)
		return fmt.Errorf("shared: reserving %d bytes for a region: %w", p.regionSize, err)
	}
	if err = d.MemMap(va, p.regionSize, h); err == nil {
		locs := []icuda.MemLocation{{Type: locHost}, {Type: locDevice, ID: int32(d.Ordinal())}}
		if err = d.MemSetAccessAt(va, p.regionSize, locs); err != nil {
			_ = d.MemUnmap(va, p.regionSize)
		}
	}
	if err != nil {
		_ = d.MemAddressFree(va, p.regionSize)
		_ = d.MemRelease(h)
		return fmt.Errorf("shared: mapping a region's granules: %w", err)
	}
	p.dev = d
	p.vmm = append(p.vmm, vmmRegion{h: h, va: va})
	p.maps = append(p.maps, uintptr(va))
	p.registered = append(p.registered, false)
	return nil
}

// importRegion imports the exported descriptor of a VMM region and maps it.
func (p *Process) importRegion(d *icuda.Device, fd int) error {
	h, err := d.MemImportFD(fd)
	if err != nil {
		return fmt.Errorf("shared: importing a region's granules: %w", err)
	}
	return p.mapVMM(d, h)
}

// unmapVMM undoes mapVMM for every region.
func (p *Process) unmapVMM() error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = fmt.Errorf("shared: unmapping a region's granules: %w", err)
		}
	}
	for _, r := range p.vmm {
		keep(p.dev.MemUnmap(r.va, p.regionSize))
		keep(p.dev.MemAddressFree(r.va, p.regionSize))
		keep(p.dev.MemRelease(r.h))
	}
	p.vmm = nil
	return first
}

// newVMMRegions makes the owner's regions of a VMM pool: exportable granules at the host NUMA
// node nearest the device (node 0 when the driver does not say), each exported as a file
// descriptor to pass to attaching processes. It returns the descriptors and the handles.
func newVMMRegions(d *icuda.Device, l layout) (fds []int, hs []icuda.MemHandle, err error) {
	node, ok := d.HostNUMAID()
	if !ok {
		node = 0
	}
	loc := icuda.MemLocation{Type: locHostNUMA, ID: int32(node)}
	for i := 0; i < l.regions; i++ {
		h, err := d.MemCreateExportable(l.regionSize, loc)
		if err != nil {
			return fds, hs, fmt.Errorf("shared: creating %d bytes of exportable host granules: %w", l.regionSize, err)
		}
		hs = append(hs, h)
		fd, err := d.MemExportFD(h)
		if err != nil {
			return fds, hs, fmt.Errorf("shared: exporting a region: %w", err)
		}
		fds = append(fds, fd)
	}
	return fds, hs, nil
}

// mapRegions maps the pool's regions in this process as its backend says: a VMM pool's
// granules mapped (the owner's handles) or imported (an attached process's descriptors), a
// Locked pool's memfds mapped, locked and registered.
func (p *Process) mapRegions(fds []int, cfg procConfig) error {
	if cfg.backend != VMM {
		for _, fd := range fds {
			if err := p.mapRegion(fd, cfg); err != nil {
				return err
			}
		}
		return nil
	}
	d, err := icuda.Of(cfg.dev)
	if err != nil {
		return fmt.Errorf("%w: a VMM pool needs a CUDA device in every process: %w", ErrInvalidOptions, err)
	}
	if cfg.handles != nil {
		for i, h := range cfg.handles {
			if err := p.mapVMM(d, h); err != nil {
				for _, h := range cfg.handles[i+1:] {
					_ = d.MemRelease(h)
				}
				return err
			}
		}
		return nil
	}
	for _, fd := range fds {
		if err := p.importRegion(d, fd); err != nil {
			return err
		}
	}
	return nil
}
