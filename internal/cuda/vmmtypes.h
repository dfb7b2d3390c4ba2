// The driver structs of the VMM calls, with the layout of cuda.h (CUDA 12 and 13 agree on it)
// and checked by static assertions: included by every cgo preamble that uses them, each its own
// C translation unit (driver_cgo.go, vmm_cgo.go).

#ifndef PINMALLOC_VMMTYPES_H
#define PINMALLOC_VMMTYPES_H

typedef unsigned long long pmDevPtr; // CUdeviceptr, CUmemGenericAllocationHandle

typedef struct { int type; int id; } pmMemLocation; // CUmemLocation

typedef struct { // CUmemAllocationProp
	int type;                 // CUmemAllocationType: 1 = CU_MEM_ALLOCATION_TYPE_PINNED
	int requestedHandleTypes; // CUmemAllocationHandleType: 0 = none
	pmMemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} pmMemAllocationProp;

typedef struct { pmMemLocation location; int flags; } pmMemAccessDesc; // CUmemAccessDesc

_Static_assert(sizeof(pmMemLocation) == 8, "CUmemLocation layout");
_Static_assert(sizeof(pmMemAllocationProp) == 32, "CUmemAllocationProp layout");
_Static_assert(sizeof(pmMemAccessDesc) == 12, "CUmemAccessDesc layout");

#endif
