package cuda

import (
	"fmt"
	"math"

	"github.com/pinmalloc/pinmalloc"
)

// Shareable handles of VMM allocations: physical memory one process creates exportable,
// exports as a POSIX file descriptor, and another process imports, maps and accesses (NCCL's
// shared-memory transport does this with HOST_NUMA granules). The driver refuses an
// exportable HOST allocation (measured); that it accepts an exportable HOST_NUMA one is what
// NCCL's use suggests, not yet measured here.

// HandleTypePOSIXFD is CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
const HandleTypePOSIXFD = 1

// MemCreateExportable is MemCreateAt for memory that may be exported as a POSIX file
// descriptor (MemExportFD). The driver refuses it at the HOST location; use a HOST_NUMA one.
func (d *Device) MemCreateExportable(size uintptr, loc MemLocation) (h MemHandle, err error) {
	err = d.Do(func() (e error) { h, e = d.drv.memCreateExportable(size, loc); return })
	return h, d.track(&d.handles, uint64(h), 1, err)
}

// MemExportFD returns a POSIX file descriptor for the physical memory of h, which must have
// been made by MemCreateExportable. The descriptor is the caller's to close; pass it to
// another process (over a Unix socket, with SCM_RIGHTS) to MemImportFD there.
func (d *Device) MemExportFD(h MemHandle) (fd int, err error) {
	err = d.Do(func() (e error) { fd, e = d.drv.memExportFD(h); return })
	return fd, err
}

// MemImportFD returns a handle to the physical memory of a descriptor MemExportFD gave, in
// this process or another: map it with MemMap and grant access with MemSetAccessAt, release
// it with MemRelease. fd stays the caller's. A descriptor outside the driver's int (negative,
// or above math.MaxInt32) gives an error matching ErrInvalidValue.
func (d *Device) MemImportFD(fd int) (h MemHandle, err error) {
	if fd < 0 || fd > math.MaxInt32 { // the driver's int would cut it to another descriptor
		return 0, fmt.Errorf("%w: file descriptor %d to import", pinmalloc.ErrInvalidValue, fd)
	}
	err = d.Do(func() (e error) { h, e = d.drv.memImportFD(fd); return })
	return h, d.track(&d.handles, uint64(h), 1, err)
}
