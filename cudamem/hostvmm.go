package cudamem

// HostVMM: pinned host memory through the CUDA VMM API (vmm.go), the provider NewHost picks
// where the driver has VMM host memory (CUDA 12.2+ with host NUMA support, or CUDA 13's host
// location). Choose it for pinned host memory that commits and decommits granule by granule,
// lives on the NUMA node asked for, is pinned by the driver (no RLIMIT_MEMLOCK applies) and
// copies in one call whatever the size of the block.

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/pinmalloc/pinmalloc"
	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// HostVMM hands out pinned host memory with the CUDA VMM API: each granule is
// physical host memory created at a host location (a NUMA node, or the host), mapped into the
// region's reserved range and granted read and write access to the host (the CPU) and to the
// devices of HostOptions. The driver pins it: no RLIMIT_MEMLOCK applies. A device addresses it
// at the same address (DevicePointer).
type HostVMM struct {
	vmm
	populate bool

	mu      sync.Mutex
	regions []*arena.Region // live regions, for DevicePointer
}

// maxHostDevices is the most devices VMM host memory can be granted to: the device a HostVMM
// is made on and HostOptions.Devices, each counted once. The driver is asked to grant access
// to all of them and to the host in one call, which the binding passes at most 16 locations.
const maxHostDevices = icuda.MaxAccess - 1

// NewHostVMM returns a provider of VMM host memory on dev. It fails with an error wrapping
// cuda.ErrNotSupported when the driver has no VMM host memory, or none at the node o.NUMA asks
// for, with one wrapping arena.ErrInvalid when o.Devices names a device the machine lacks
// or, with dev, more than 15 devices, and with one wrapping arena.ErrExhausted when the driver
// is out of memory for the granule it creates to try the location.
func NewHostVMM(dev *cuda.Device, o HostOptions) (*HostVMM, error) {
	p := &HostVMM{populate: o.Populate}
	if err := p.cudaBase.init(dev, "cuda-host-vmm", arena.HostPinned); err != nil {
		return nil, err
	}
	n, err := icuda.Count()
	if err != nil {
		return nil, fmt.Errorf("%w: counting devices: %w", arena.ErrInvalid, err)
	}
	others := map[int]struct{}{}
	for _, d := range o.Devices {
		if d != p.dev.Ordinal() {
			others[d] = struct{}{}
		}
	}
	if len(others) >= maxHostDevices {
		return nil, fmt.Errorf("%w: host VMM memory granted to %d devices (device %d and %d others): at most %d, the driver taking %d locations in one grant of access, the host's among them",
			arena.ErrInvalid, len(others)+1, p.dev.Ordinal(), len(others), maxHostDevices, icuda.MaxAccess)
	}
	var devs []cuda.Location
	for _, d := range o.Devices {
		l := cuda.Location{Type: cuda.LocationDevice, ID: d}
		if d < 0 || d >= n {
			return nil, fmt.Errorf("%w: device ordinal %d (the machine has %d devices)", arena.ErrInvalid, d, n)
		}
		if l != dev.Location() && !slices.Contains(devs, l) {
			devs = append(devs, l)
		}
	}
	loc, fallback, err := hostLocation(p.dev, o.NUMA)
	if err != nil {
		return nil, err
	}
	err = p.vmm.initHost(loc, devs)
	if err != nil && fallback && !errors.Is(err, arena.ErrCommit) {
		// The driver refuses the node found nearest the device: let it place the memory. Not
		// when it is out of memory there (arena.ErrCommit): a moment's pressure would put the
		// provider's memory away from the device for good.
		err = p.vmm.initHost(cuda.HostLocation(), devs)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// initHost sets up the VMM machinery for host memory at loc, granted to the host, the device
// and devs, after checking that the driver creates memory there: the granularity query and one
// granule created and released (a driver may refuse a location at either). A release the
// driver refuses strands the granule's handle, released again by the next commit or
// ReleaseKept: the location works all the same. A cuMemCreate refused for want of memory says
// so (arena.ErrCommit, arena.ErrExhausted); any other refusal is the location's
// (arena.ErrInvalid).
func (v *vmm) initHost(loc cuda.Location, devs []cuda.Location) error {
	b := &v.cudaBase
	defer b.dev.RelaxCapture()() // beside a user's capture: doc.go
	access := append([]cuda.Location{loc, b.pub.Location()}, devs...)
	if err := v.init(loc, access, "host"); err != nil {
		return err
	}
	if v.gran > arena.DefaultChunkSize {
		return fmt.Errorf("%w: host VMM granularity %d above the %d-byte chunk", arena.ErrInvalid, v.gran, arena.DefaultChunkSize)
	}
	h, err := b.dev.MemCreateAt(v.gran, v.mloc)
	if err = b.call(&b.handles, 1, err); errors.Is(err, pinmalloc.ErrOutOfMemory) {
		// Memory pressure, not a location the driver refuses: a later try may succeed.
		return b.driverError(arena.ErrCommit, fmt.Sprintf("cuMemCreate of host memory at %+v",
			loc), v.gran, err)
	} else if err != nil {
		return fmt.Errorf("%w: cuMemCreate of host memory at %+v on device %d: %w", arena.ErrInvalid, loc, b.dev.Ordinal(), err)
	}
	_ = v.release([]icuda.MemHandle{h}) // refused: stranded, released again later
	v.zero = true                       // a fresh granule reads zero (measured on the H100)
	return nil
}

// hostLocation picks where VMM host memory lives: the node asked for, or the node nearest
// the device (DeviceNode), where the driver has host NUMA support; else the host location
// (CUDA 13), which is also where it goes when no source knows the device's node. fallback says
// that the HOST location may replace the node chosen if the driver refuses it (the node was
// not asked for).
func hostLocation(dev *icuda.Device, n arena.NUMA) (loc cuda.Location, fallback bool, err error) {
	host, hasNUMA := dev.HostVMMSupported()
	node, asked := n.Node()
	switch {
	case asked && node < 0:
		return cuda.Location{}, false, fmt.Errorf("%w: NUMA node %d", arena.ErrInvalid, node)
	case asked && hasNUMA:
		return cuda.Location{Type: cuda.LocationHostNUMA, ID: node}, false, nil
	case asked && host:
		return cuda.Location{}, false, fmt.Errorf("%w: NUMA node %d asked, but the driver of device %d places host VMM memory on no chosen node: %w",
			arena.ErrInvalid, node, dev.Ordinal(), pinmalloc.ErrNotSupported)
	case hasNUMA:
		if id, _, ok := deviceNode(dev); ok {
			return cuda.Location{Type: cuda.LocationHostNUMA, ID: id}, host, nil
		}
		if host {
			return cuda.HostLocation(), false, nil
		}
		return cuda.Location{Type: cuda.LocationHostNUMA, ID: 0}, false, nil
	case host:
		return cuda.HostLocation(), false, nil
	}
	return cuda.Location{}, false, fmt.Errorf("%w: the driver of device %d has no VMM host memory (device attributes 141 and 145): %w",
		arena.ErrInvalid, dev.Ordinal(), pinmalloc.ErrNotSupported)
}

// Node implements arena.Placer: the NUMA node the memory is created at, or arena.NodeUnknown
// at the HOST location.
func (p *HostVMM) Node() int {
	if p.loc.Type == cuda.LocationHostNUMA {
		return p.loc.ID
	}
	return arena.NodeUnknown
}

// Location returns where the provider's memory lives.
func (p *HostVMM) Location() cuda.Location { return p.loc }

// Reserve implements arena.Provider. With HostOptions.Populate the region is committed whole.
// A populated region whose commit fails is given back, and what the driver refuses to give
// back of it is kept and given back at the next Reserve or Release, or by ReleaseKept.
func (p *HostVMM) Reserve(size, alignment uintptr) (*arena.Region, error) {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	// Orphans the driver refuses again stay kept, for Close to report.
	_ = p.releaseOrphans()
	r, err := p.vmm.Reserve(size, alignment)
	if err != nil {
		return nil, err
	}
	if p.populate {
		if err := p.Commit(r, 0, r.Size); err != nil {
			_ = p.orphan(r)
			return nil, err
		}
		r.Committed = true
	}
	p.mu.Lock()
	p.regions = append(p.regions, r)
	p.mu.Unlock()
	return r, nil
}

// Release implements arena.Provider.
func (p *HostVMM) Release(r *arena.Region) error {
	defer p.dev.RelaxCapture()() // beside a user's capture: doc.go
	_ = p.releaseOrphans()
	if err := p.vmm.Release(r); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.regions {
		if x == r {
			p.regions = append(p.regions[:i], p.regions[i+1:]...)
			break
		}
	}
	return nil
}

// Zero implements arena.Zeroer, with the CPU.
func (p *HostVMM) Zero(addr, size uintptr) error { return hostZero(addr, size) }

// DevicePointer returns the address at which a device sees host address addr, which must lie in
// committed memory of the provider: for VMM host memory, addr itself. A granule that a failed
// commit left mapped (its undo refused) is not committed memory: it is refused too.
func (p *HostVMM) DevicePointer(addr uintptr) (cuda.DevicePtr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.vmm.mu.Lock()
	defer p.vmm.mu.Unlock()
	for _, r := range p.regions {
		if v, ok := r.Handle.(*vmmRegion); ok && addr-r.Base < r.Size {
			if g := int((addr - r.Base) / p.gran); v.mapped.Get(g) && !v.stray.Get(g) {
				return cuda.DevicePtr(addr), nil
			}
		}
	}
	return 0, fmt.Errorf("%w: device pointer of %#x: not in committed memory of the %s provider", arena.ErrInvalid, addr, p.name)
}
