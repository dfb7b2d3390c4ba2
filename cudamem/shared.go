package cudamem

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/cuda"
	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
	"github.com/pinmalloc/pinmalloc/internal/errkind"
)

// Host memory several processes share (package ipcpool's pools): what each process asks of
// its driver so that copies to and from that memory run by DMA. The processes map the
// memory themselves; here is the CUDA side, one of two ways:
//
//   - Memory the processes map from files (memfds): each process registers every region it
//     maps with its own context, as one registration (RegisterShared), so that no buffer
//     inside a region spans two registrations.
//   - Exportable VMM host granules: one process creates each region (NewHostExport) at the
//     host NUMA node nearest its device, and passes it to the others as a file descriptor
//     (HostExport.FD); each imports it (ImportHostExport) and maps the regions one after
//     another in one reservation with read-write access for the host and its device
//     (MapHostExports). The driver pins them: no registration, no mlock. The driver refuses
//     an exportable allocation at the HOST location (measured); HOST_NUMA is what NCCL's
//     shared-memory transport uses (nccl#2106).
//
// The fake driver (internal/fakecuda) holds these calls to the real driver's rules: a copy
// must lie inside one registration or one run of mapped granules, an imported descriptor must
// be an exported allocation's, and a mapping must be released before its reservation
// (internal/fakecuda/vmmshare_test.go; this package's shared_test.go).

// RegisterShared registers [addr, addr+size), host memory the caller maps, with the context of
// dev as one registration, portable to every context and mapped for the device, so that every
// copy inside it runs by DMA. UnregisterShared undoes it. size is at most what one
// registration may hold (drivers from r580 on refuse 512 GiB or more).
func RegisterShared(dev *cuda.Device, addr, size uintptr) error {
	d, err := internalDevice(dev, "shared")
	if err != nil {
		return err
	}
	defer d.RelaxCapture()() // beside a user's capture: doc.go
	if err := d.MemHostRegister(addr, size, registerFlags); err != nil {
		return fmt.Errorf("cudamem: registering %d bytes of shared memory at %#x: %w", size, addr, err)
	}
	return nil
}

// UnregisterShared undoes RegisterShared of the range that starts at addr.
func UnregisterShared(dev *cuda.Device, addr uintptr) error {
	d, err := internalDevice(dev, "shared")
	if err != nil {
		return err
	}
	defer d.RelaxCapture()() // beside a user's capture: doc.go
	if err := d.MemHostUnregister(addr); err != nil {
		return fmt.Errorf("cudamem: unregistering shared memory at %#x: %w", addr, err)
	}
	return nil
}

// HostExport is one allocation of host granules several processes map: made exportable by one
// process (NewHostExport), passed to others as a file descriptor (FD), imported by them
// (ImportHostExport), and mapped by each (MapHostExports). Its methods are safe for
// concurrent use.
type HostExport struct {
	d    *icuda.Device
	size uintptr

	mu sync.Mutex
	h  icuda.MemHandle // 0 once released
}

// NewHostExport creates size bytes (a multiple of 2 MiB) of host granules at the host NUMA
// node nearest dev (node 0 where the driver does not say), exportable as a POSIX file
// descriptor.
func NewHostExport(dev *cuda.Device, size uintptr) (*HostExport, error) {
	d, err := internalDevice(dev, "shared")
	if err != nil {
		return nil, err
	}
	defer d.RelaxCapture()() // beside a user's capture: doc.go
	node, ok := d.HostNUMAID()
	if !ok {
		node = 0
	}
	h, err := d.MemCreateExportable(size, icuda.MemLocation{Type: int32(cuda.LocationHostNUMA), ID: int32(node)})
	if err != nil {
		return nil, fmt.Errorf("cudamem: creating %d bytes of exportable host granules at node %d: %w", size, node, err)
	}
	return &HostExport{d: d, h: h, size: size}, nil
}

// ImportHostExport imports the allocation of size bytes a descriptor from FD names (another
// process's, passed over a Unix socket). It does not take fd.
func ImportHostExport(dev *cuda.Device, fd int, size uintptr) (*HostExport, error) {
	d, err := internalDevice(dev, "shared")
	if err != nil {
		return nil, err
	}
	defer d.RelaxCapture()() // beside a user's capture: doc.go
	h, err := d.MemImportFD(fd)
	if err != nil {
		return nil, fmt.Errorf("cudamem: importing exported host granules: %w", err)
	}
	return &HostExport{d: d, h: h, size: size}, nil
}

// FD returns a new file descriptor of the allocation, for another process to import; the
// caller closes it.
func (e *HostExport) FD() (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == 0 {
		return -1, fmt.Errorf("%w: exporting host granules: released", arena.ErrInvalid)
	}
	fd, err := e.d.MemExportFD(e.h)
	if err != nil {
		return -1, fmt.Errorf("cudamem: exporting host granules: %w", err)
	}
	return fd, nil
}

// handle returns the allocation's handle, 0 once released.
func (e *HostExport) handle() icuda.MemHandle {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.h
}

// Release gives the allocation's handle back; a mapping of it (MapHostExports) keeps the
// memory until it is closed. When the driver refuses, Release returns its error and keeps the
// handle: a later Release tries again. A Release after one that succeeded does nothing.
func (e *HostExport) Release() error {
	defer e.d.RelaxCapture()() // beside a user's capture: doc.go
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == 0 {
		return nil
	}
	if err := e.d.MemRelease(e.h); err != nil {
		return fmt.Errorf("cudamem: releasing host granules (kept, for a later Release): %w", err)
	}
	e.h = 0
	return nil
}

// HostMapping is host granules mapped one allocation after another in one reservation, with
// read-write access for the host and the device. Its methods are safe for concurrent use.
type HostMapping struct {
	d    *icuda.Device
	size uintptr

	mu         sync.Mutex
	closed     bool
	va         icuda.DevicePtr // 0 once the reservation is freed
	mapped     []*HostExport   // by position in the reservation; nil once unmapped
	unreleased []*HostExport   // unmapped, their Release refused: released again by Close
}

// MapHostExports maps exports (each of the same size, a multiple of 2 MiB) one after another
// in one reservation aligned to 2 MiB, and grants the host and dev read-write access. The
// mapping takes the exports: Close unmaps and releases them. On error it gives back what it
// mapped and the exports, and returns a nil mapping; when the driver refuses to give back a
// part of it, it returns with the error a closed mapping (Base 0) that keeps that part, whose
// Close tries again. A nil export is refused with arena.ErrInvalid (the others given back).
func MapHostExports(dev *cuda.Device, exports []*HostExport) (*HostMapping, error) {
	d, err := internalDevice(dev, "shared")
	if err != nil {
		return nil, err
	}
	defer d.RelaxCapture()() // beside a user's capture: doc.go
	if len(exports) == 0 {
		return nil, fmt.Errorf("%w: no host granules to map", arena.ErrInvalid)
	}
	m := &HostMapping{d: d}
	if slices.Contains(exports, nil) {
		isNil := func(e *HostExport) bool { return e == nil }
		given := slices.DeleteFunc(slices.Clone(exports), isNil)
		return m.undo(given, fmt.Errorf("%w: a nil export among %d host granules to map",
			arena.ErrInvalid, len(exports)))
	}
	rs := exports[0].size
	if rs == 0 || uintptr(len(exports)) > ^uintptr(0)/rs {
		return m.undo(exports, fmt.Errorf("%w: %d allocations of %d bytes of host granules", arena.ErrInvalid, len(exports), rs))
	}
	m.size = uintptr(len(exports)) * rs
	if m.va, err = d.MemAddressReserve(m.size, 2<<20); err != nil {
		return m.undo(exports, fmt.Errorf("cudamem: reserving %d bytes for shared host granules: %w", m.size, err))
	}
	locs := []icuda.MemLocation{{Type: int32(cuda.LocationHost)}, {Type: int32(cuda.LocationDevice), ID: int32(d.Ordinal())}}
	for i, e := range exports {
		at := m.va + icuda.DevicePtr(uintptr(i)*rs)
		if e.size != rs {
			err = fmt.Errorf("%w: host granules of %d bytes among some of %d", arena.ErrInvalid, e.size, rs)
		} else if err = d.MemMap(at, rs, e.handle()); err == nil {
			m.mapped = append(m.mapped, e)
			err = d.MemSetAccessAt(at, rs, locs)
		}
		if err != nil {
			return m.undo(exports[len(m.mapped):], fmt.Errorf("cudamem: mapping shared host granules: %w", err))
		}
	}
	return m, nil
}

// undo gives back what MapHostExports did of m and the exports it did not map, after err. It
// returns nil and err when the driver gave everything back, and m (closed, holding what the
// driver refused) and err with the refusals otherwise.
func (m *HostMapping) undo(unmapped []*HostExport, err error) (*HostMapping, error) {
	m.unreleased = append(m.unreleased, unmapped...)
	if cerr := m.Close(); cerr != nil {
		return m, errors.Join(err, cerr)
	}
	return nil, err
}

// Base returns the mapping's first address, 0 once it is closed.
func (m *HostMapping) Base() uintptr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0
	}
	return uintptr(m.va)
}

// Close unmaps every allocation, releases them and the reservation. When the driver refuses a
// part of it, Close returns the refusal and keeps what it could not give back (a mapping, a
// handle, the reservation, which is freed only once nothing is mapped in it): a later Close
// tries again. A Close after one that succeeded does nothing.
func (m *HostMapping) Close() error {
	defer m.d.RelaxCapture()() // beside a user's capture: doc.go
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	var errs []error
	mapped := false
	for i, e := range m.mapped {
		if e == nil {
			continue
		}
		if err := m.d.MemUnmap(m.va+icuda.DevicePtr(uintptr(i)*e.size), e.size); err != nil {
			errs = append(errs, err)
			mapped = true
			continue
		}
		m.mapped[i] = nil
		m.unreleased = append(m.unreleased, e)
	}
	left := m.unreleased[:0]
	for _, e := range m.unreleased {
		if err := e.Release(); err != nil {
			errs = append(errs, err)
			left = append(left, e)
		}
	}
	m.unreleased = left
	if !mapped {
		m.mapped = nil
		if m.va != 0 {
			if err := m.d.MemAddressFree(m.va, m.size); err != nil {
				errs = append(errs, err)
			} else {
				m.va = 0
			}
		}
	}
	if err := errkind.Once(errs...); err != nil { // a device fault: every call refused alike
		return fmt.Errorf("cudamem: unmapping shared host granules (what was refused is kept, for a later Close): %w", err)
	}
	return nil
}
