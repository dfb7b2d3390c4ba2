//go:build cgo && linux

package cuda

/*
#include <stddef.h>
#include <stdint.h>

typedef struct { int type; int id; } pmsMemLocation;

typedef struct {
	int type;
	int requestedHandleTypes;
	pmsMemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} pmsMemAllocationProp;

_Static_assert(sizeof(pmsMemAllocationProp) == 32, "CUmemAllocationProp layout");

// cuMemCreate at a location, exportable as a POSIX file descriptor.
static int pms_createExportable(uintptr_t fn, unsigned long long *h, size_t size, int locType, int locID) {
	pmsMemAllocationProp prop = {0};
	prop.type = 1; // CU_MEM_ALLOCATION_TYPE_PINNED
	prop.requestedHandleTypes = 1; // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	prop.location.type = locType;
	prop.location.id = locID;
	return ((int (*)(unsigned long long *, size_t, const pmsMemAllocationProp *, unsigned long long))fn)(h, size, &prop, 0);
}

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

func (dr *driver) memCreateExportable(size uintptr, loc MemLocation) (MemHandle, error) {
	var h C.ulonglong
	err := dr.call(symMemCreate, func(f C.uintptr_t) C.int {
		return C.pms_createExportable(f, &h, C.size_t(size), C.int(loc.Type), C.int(loc.ID))
	})
	return MemHandle(h), err
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
