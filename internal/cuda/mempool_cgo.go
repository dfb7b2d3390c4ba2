//go:build cgo && linux

package cuda

// The memory pool calls (cuMemPoolCreate and the calls around it). CUmemPoolProps is declared
// with the layout of cuda.h (88 bytes since CUDA 11.2: CUDA 12.2 and later carved maxSize and
// usage out of the reserved bytes), checked by a static assertion.

/*
#include <stddef.h>
#include <stdint.h>

typedef unsigned long long pmpDevPtr;

typedef struct { int type; int id; } pmpMemLocation;

typedef struct {
	int allocType;   // CU_MEM_ALLOCATION_TYPE_PINNED
	int handleTypes; // CUmemAllocationHandleType
	pmpMemLocation location;
	void *win32SecurityAttributes;
	size_t maxSize;
	unsigned short usage;
	unsigned char reserved[54];
} pmpMemPoolProps;

typedef struct { pmpMemLocation location; int flags; } pmpMemAccessDesc;

_Static_assert(sizeof(pmpMemPoolProps) == 88, "CUmemPoolProps layout");
_Static_assert(sizeof(pmpMemAccessDesc) == 12, "CUmemAccessDesc layout");

#define PMP_MAX_ACCESS 16

// cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
static int pmp_create(uintptr_t fn, uintptr_t *pool, int locType, int locID, int handleTypes, size_t maxSize) {
	pmpMemPoolProps props = {0};
	props.allocType = 1;
	props.handleTypes = handleTypes;
	props.location.type = locType;
	props.location.id = locID;
	props.maxSize = maxSize;
	void *p = NULL;
	int r = ((int (*)(void **, const pmpMemPoolProps *))fn)(&p, &props);
	*pool = (uintptr_t)p;
	return r;
}

// cuMemPoolSetAttribute, cuMemPoolGetAttribute with a cuuint64_t value.
static int pmp_attr(uintptr_t fn, uintptr_t pool, int attr, uint64_t *v) {
	return ((int (*)(void *, int, void *))fn)((void *)pool, attr, v);
}

// cuMemPoolSetAccess(CUmemoryPool, const CUmemAccessDesc *, size_t count)
static int pmp_setAccess(uintptr_t fn, uintptr_t pool, const int *types, const int *ids, int n, int flags) {
	pmpMemAccessDesc desc[PMP_MAX_ACCESS] = {{{0}}};
	if (n < 1 || n > PMP_MAX_ACCESS) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < n; i++) {
		desc[i].location.type = types[i];
		desc[i].location.id = ids[i];
		desc[i].flags = flags;
	}
	return ((int (*)(void *, const pmpMemAccessDesc *, size_t))fn)((void *)pool, desc, (size_t)n);
}

// cuMemPoolTrimTo(CUmemoryPool, size_t minBytesToKeep)
static int pmp_trimTo(uintptr_t fn, uintptr_t pool, size_t keep) {
	return ((int (*)(void *, size_t))fn)((void *)pool, keep);
}

// cuMemAllocFromPoolAsync(CUdeviceptr *, size_t, CUmemoryPool, CUstream)
static int pmp_allocFrom(uintptr_t fn, pmpDevPtr *p, size_t n, uintptr_t pool, uintptr_t s) {
	return ((int (*)(pmpDevPtr *, size_t, void *, void *))fn)(p, n, (void *)pool, (void *)s);
}
// cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
static int pmp_defaultPool(uintptr_t fn, uintptr_t *pool, int dev) {
	void *p = NULL;
	int r = ((int (*)(void **, int))fn)(&p, dev);
	*pool = (uintptr_t)p;
	return r;
}
*/
import "C"

func (dr *driver) deviceDefaultMemPool(dev int32) (MemPool, error) {
	var p C.uintptr_t
	err := dr.call(symDeviceGetDefaultMemPool, func(f C.uintptr_t) C.int { return C.pmp_defaultPool(f, &p, C.int(dev)) })
	return MemPool(p), err
}

func (dr *driver) memPoolCreate(props MemPoolProps) (MemPool, error) {
	var p C.uintptr_t
	err := dr.call(symMemPoolCreate, func(f C.uintptr_t) C.int {
		return C.pmp_create(f, &p, C.int(props.Location.Type), C.int(props.Location.ID), C.int(props.HandleTypes), C.size_t(props.MaxSize))
	})
	return MemPool(p), err
}

func (dr *driver) memPoolDestroy(p MemPool) error { return dr.callPtr(symMemPoolDestroy, uintptr(p)) }

func (dr *driver) memPoolSetAttribute(p MemPool, attr MemPoolAttr, v uint64) error {
	cv := C.uint64_t(v)
	return dr.call(symMemPoolSetAttribute, func(f C.uintptr_t) C.int {
		return C.pmp_attr(f, C.uintptr_t(p), C.int(attr), &cv)
	})
}

func (dr *driver) memPoolGetAttribute(p MemPool, attr MemPoolAttr) (uint64, error) {
	var cv C.uint64_t
	err := dr.call(symMemPoolGetAttribute, func(f C.uintptr_t) C.int {
		return C.pmp_attr(f, C.uintptr_t(p), C.int(attr), &cv)
	})
	return uint64(cv), err
}

func (dr *driver) memPoolSetAccess(p MemPool, locs []MemLocation, revoke bool) error {
	var types, ids [C.PMP_MAX_ACCESS]C.int
	for i, l := range locs {
		types[i], ids[i] = C.int(l.Type), C.int(l.ID)
	}
	flags := C.int(3) // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	if revoke {
		flags = 0
	}
	return dr.call(symMemPoolSetAccess, func(f C.uintptr_t) C.int {
		return C.pmp_setAccess(f, C.uintptr_t(p), &types[0], &ids[0], C.int(len(locs)), flags)
	})
}

func (dr *driver) memPoolTrimTo(p MemPool, keep uintptr) error {
	return dr.call(symMemPoolTrimTo, func(f C.uintptr_t) C.int { return C.pmp_trimTo(f, C.uintptr_t(p), C.size_t(keep)) })
}

func (dr *driver) memAllocFromPoolAsync(n uintptr, p MemPool, s Stream) (DevicePtr, error) {
	var d C.pmpDevPtr
	err := dr.call(symMemAllocFromPoolAsync, func(f C.uintptr_t) C.int {
		return C.pmp_allocFrom(f, &d, C.size_t(n), C.uintptr_t(p), C.uintptr_t(s))
	})
	return DevicePtr(d), err
}
