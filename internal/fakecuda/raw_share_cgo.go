//go:build cgo && linux

package fakecuda

// Raw calls of the shareable-handle entry points (cuMemExportToShareableHandle,
// cuMemImportFromShareableHandle) with a POSIX file descriptor, for the fake's own tests.

/*
#include <stdint.h>

static int raw_export(uintptr_t fn, int *fd, unsigned long long h, int type) {
	return ((int (*)(void *, unsigned long long, int, unsigned long long))fn)(fd, h, type, 0);
}
static int raw_import(uintptr_t fn, unsigned long long *h, int fd, int type) {
	return ((int (*)(unsigned long long *, void *, int))fn)(h, (void *)(intptr_t)fd, type);
}
*/
import "C"

import "github.com/pinmalloc/pinmalloc/internal/cuda"

// HandlePOSIXFD is CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, for MemCreate's handleTypes.
const HandlePOSIXFD = 1

// MemExport calls cuMemExportToShareableHandle on dev's context for handle h with the handle
// type typ, and returns the file descriptor (the caller's to close).
func (d *Driver) MemExport(dev *cuda.Device, h cuda.MemHandle, typ int) (int, error) {
	fn, err := d.sym("cuMemExportToShareableHandle")
	if err != nil {
		return -1, err
	}
	fd := C.int(-1)
	err = dev.Do(func() error { return result(C.raw_export(fn, &fd, C.ulonglong(h), C.int(typ))) })
	return int(fd), err
}

// MemImport calls cuMemImportFromShareableHandle on dev's context for file descriptor fd of
// handle type typ. The handle is released with MemRelease; fd stays the caller's.
func (d *Driver) MemImport(dev *cuda.Device, fd, typ int) (cuda.MemHandle, error) {
	fn, err := d.sym("cuMemImportFromShareableHandle")
	if err != nil {
		return 0, err
	}
	var h C.ulonglong
	err = dev.Do(func() error { return result(C.raw_import(fn, &h, C.int(fd), C.int(typ))) })
	return cuda.MemHandle(h), err
}
