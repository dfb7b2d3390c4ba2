//go:build cgo && linux

package cuda

/*
#include <stddef.h>
#include <stdint.h>

// cuMemExportToShareableHandle as a POSIX file descriptor.
static int pms_export(uintptr_t fn, int *fd, unsigned long long h) {
	return ((int (*)(void *, unsigned long long, int, unsigned long long))fn)(fd, h, 1, 0);
}

// cuMemImportFromShareableHandle of a POSIX file descriptor.
static int pms_import(uintptr_t fn, unsigned long long *h, int fd) {
	return ((int (*)(unsigned long long *, void *, int))fn)(h, (void *)(intptr_t)fd, 1);
}
*/
import "C"

// memCreateExportable is memCreateAt asking for a POSIX file descriptor handle type.
func (dr *driver) memCreateExportable(size uintptr, loc MemLocation) (MemHandle, error) {
	return dr.memCreateTypes(size, loc, HandleTypePOSIXFD)
}

func (dr *driver) memExportFD(h MemHandle) (int, error) {
	fd := C.int(-1)
	err := dr.call(symMemExportToShareableHandle, func(f C.uintptr_t) C.int {
		return C.pms_export(f, &fd, C.ulonglong(h))
	})
	return int(fd), err
}

func (dr *driver) memImportFD(fd int) (MemHandle, error) {
	var h C.ulonglong
	err := dr.call(symMemImportFromShareableHandle, func(f C.uintptr_t) C.int {
		return C.pms_import(f, &h, C.int(fd))
	})
	return MemHandle(h), err
}
