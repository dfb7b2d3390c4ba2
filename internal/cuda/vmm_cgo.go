//go:build cgo && linux

package cuda

// The VMM calls with an explicit location: physical memory on a device or in host memory (a
// NUMA node), and access granted to several locations in one call. The struct layouts
// are vmmtypes.h's (cuda.h's).

/*
#include <stddef.h>
#include <stdint.h>

#include "vmmtypes.h"

#define PMV_MAX_ACCESS 16

static void pmv_prop(pmMemAllocationProp *prop, int locType, int locID) {
	prop->type = 1; // CU_MEM_ALLOCATION_TYPE_PINNED; no shareable handle type (HOST takes none)
	prop->location.type = locType;
	prop->location.id = locID;
}

// cuMemGetAllocationGranularity for a location.
static int pmv_granularity(uintptr_t fn, size_t *out, int locType, int locID, int option) {
	pmMemAllocationProp prop = {0};
	pmv_prop(&prop, locType, locID);
	return ((int (*)(size_t *, const pmMemAllocationProp *, int))fn)(out, &prop, option);
}

// cuMemCreate at a location, asking for the shareable handle types given (0: none).
static int pmv_create(uintptr_t fn, pmDevPtr *h, size_t size, int locType, int locID, int handleTypes) {
	pmMemAllocationProp prop = {0};
	pmv_prop(&prop, locType, locID);
	prop.requestedHandleTypes = handleTypes;
	return ((int (*)(pmDevPtr *, size_t, const pmMemAllocationProp *, unsigned long long))fn)(h, size, &prop, 0);
}

// cuMemSetAccess granting read and write to n locations (types and ids in two arrays).
static int pmv_setAccess(uintptr_t fn, pmDevPtr p, size_t size, const int *types, const int *ids, int n) {
	pmMemAccessDesc desc[PMV_MAX_ACCESS] = {{{0}}};
	if (n < 1 || n > PMV_MAX_ACCESS) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < n; i++) {
		desc[i].location.type = types[i];
		desc[i].location.id = ids[i];
		desc[i].flags = 3; // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	}
	return ((int (*)(pmDevPtr, size_t, const pmMemAccessDesc *, size_t))fn)(p, size, desc, (size_t)n);
}
*/
import "C"

// maxAccess is the most locations one MemSetAccessAt call grants access to.
const maxAccess = C.PMV_MAX_ACCESS

func (dr *driver) memGetGranularityAt(loc MemLocation, recommended bool) (uintptr, error) {
	option := C.int(0) // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	if recommended {
		option = 1 // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
	}
	var g C.size_t
	err := dr.call(symMemGetAllocationGranularity, func(f C.uintptr_t) C.int {
		return C.pmv_granularity(f, &g, C.int(loc.Type), C.int(loc.ID), option)
	})
	return uintptr(g), err
}

func (dr *driver) memCreateAt(size uintptr, loc MemLocation) (MemHandle, error) {
	return dr.memCreateTypes(size, loc, 0)
}

func (dr *driver) memCreateTypes(size uintptr, loc MemLocation, handleTypes int) (MemHandle, error) {
	var h C.pmDevPtr
	err := dr.call(symMemCreate, func(f C.uintptr_t) C.int {
		return C.pmv_create(f, &h, C.size_t(size), C.int(loc.Type), C.int(loc.ID), C.int(handleTypes))
	})
	return MemHandle(h), err
}

func (dr *driver) memSetAccessAt(p DevicePtr, size uintptr, locs []MemLocation) error {
	var types, ids [maxAccess]C.int
	for i, l := range locs {
		types[i], ids[i] = C.int(l.Type), C.int(l.ID)
	}
	return dr.call(symMemSetAccess, func(f C.uintptr_t) C.int {
		return C.pmv_setAccess(f, C.pmDevPtr(p), C.size_t(size), &types[0], &ids[0], C.int(len(locs)))
	})
}
