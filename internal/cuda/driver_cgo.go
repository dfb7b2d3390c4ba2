//go:build cgo && linux

package cuda

// The driver, loaded with dlopen and called through one C shim per signature. Every shim takes
// the entry point as a uintptr_t and its arguments by value; handles and host pointers cross as
// uintptr_t so that no Go code converts a uintptr back to an unsafe.Pointer. The three driver
// structs used are declared in vmmtypes.h with the layout of cuda.h (CUDA 12 and 13 agree on
// it) and checked by static assertions.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "vmmtypes.h"

enum {
	pmLocationDevice = 1,     // CU_MEM_LOCATION_TYPE_DEVICE
	pmAllocationPinned = 1,   // CU_MEM_ALLOCATION_TYPE_PINNED
	pmAccessReadWrite = 3,    // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
};

// pm_dlmsg copies the thread's dlerror text (or, with none, fallback) into msg, n bytes with
// the NUL, when msg is not NULL. It copies in the C call that failed: glibc frees that text at
// the thread's next dl call, which any goroutine running on the thread afterwards may make.
static void pm_dlmsg(char *msg, size_t n, const char *fallback) {
	const char *e = dlerror();
	if (msg != NULL && n > 0) snprintf(msg, n, "%s", e ? e : fallback);
}

static uintptr_t pm_dlopen(const char *path, char *msg, size_t n) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) pm_dlmsg(msg, n, "dlopen failed");
	return (uintptr_t)h;
}

static uintptr_t pm_dlsym(uintptr_t h, const char *name, char *msg, size_t n) {
	dlerror();
	void *p = dlsym((void *)h, name);
	if (p == NULL) pm_dlmsg(msg, n, "symbol is NULL");
	return (uintptr_t)p;
}

static int pm_dlclose(uintptr_t h) { return dlclose((void *)h); }

// cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
//                     CUdriverProcAddressQueryResult *symbolStatus), flags CU_GET_PROC_ADDRESS_DEFAULT.
static int pm_getProcAddress(uintptr_t fn, const char *name, int version, uintptr_t *out, int *status) {
	void *p = NULL;
	int r = ((int (*)(const char *, void **, int, uint64_t, int *))fn)(name, &p, version, 0, status);
	*out = (uintptr_t)p;
	return r;
}

// Shims by signature. The comment names the entry points that use each.

// cuInit
static int pm_u(uintptr_t fn, unsigned a) { return ((int (*)(unsigned))fn)(a); }
// cuDriverGetVersion, cuDeviceGetCount
static int pm_pint(uintptr_t fn, int *a) { return ((int (*)(int *))fn)(a); }
// cuDevicePrimaryCtxRelease_v2
static int pm_int(uintptr_t fn, int a) { return ((int (*)(int))fn)(a); }
// cuCtxSynchronize
static int pm_void(uintptr_t fn) { return ((int (*)(void))fn)(); }
// cuCtxPushCurrent_v2, cuMemFreeHost, cuMemHostUnregister, cuStreamDestroy_v2,
// cuStreamSynchronize, cuEventSynchronize, cuEventDestroy_v2
static int pm_ptr(uintptr_t fn, uintptr_t a) { return ((int (*)(void *))fn)((void *)a); }
// cuStreamGetFlags
static int pm_streamGetFlags(uintptr_t fn, uintptr_t s, unsigned *out) {
	return ((int (*)(void *, unsigned *))fn)((void *)s, out);
}
// cuStreamGetCtx
static int pm_streamGetCtx(uintptr_t fn, uintptr_t s, uintptr_t *out) {
	void *c = NULL;
	int r = ((int (*)(void *, void **))fn)((void *)s, &c);
	*out = (uintptr_t)c;
	return r;
}
// cuStreamCreate, cuEventCreate
static int pm_create(uintptr_t fn, uintptr_t *out, unsigned flags) {
	void *h = NULL;
	int r = ((int (*)(void **, unsigned))fn)(&h, flags);
	*out = (uintptr_t)h;
	return r;
}
// cuGetErrorName, cuGetErrorString
static int pm_errorText(uintptr_t fn, int res, const char **out) {
	return ((int (*)(int, const char **))fn)(res, out);
}

// cuDeviceGet
static int pm_deviceGet(uintptr_t fn, int *dev, int ordinal) {
	return ((int (*)(int *, int))fn)(dev, ordinal);
}
// cuDeviceGetName
static int pm_deviceGetName(uintptr_t fn, char *buf, int len, int dev) {
	return ((int (*)(char *, int, int))fn)(buf, len, dev);
}
// cuDeviceTotalMem_v2
static int pm_deviceTotalMem(uintptr_t fn, size_t *out, int dev) {
	return ((int (*)(size_t *, int))fn)(out, dev);
}
// cuDeviceGetAttribute
static int pm_deviceGetAttribute(uintptr_t fn, int *out, int attr, int dev) {
	return ((int (*)(int *, int, int))fn)(out, attr, dev);
}
// cuDevicePrimaryCtxRetain
static int pm_primaryCtxRetain(uintptr_t fn, uintptr_t *ctx, int dev) {
	void *c = NULL;
	int r = ((int (*)(void **, int))fn)(&c, dev);
	*ctx = (uintptr_t)c;
	return r;
}
// cuDevicePrimaryCtxGetState
static int pm_primaryCtxGetState(uintptr_t fn, int dev, int *active) {
	unsigned flags = 0;
	return ((int (*)(int, unsigned *, int *))fn)(dev, &flags, active);
}
// The Dos under way on this thread, outermost first, by their Device's tag (Device.Do pushes
// with pm_doPush and pops with pm_doPop): a call of a closed Device nested in one of them still
// runs (pm_inDo). A Do nested deeper than pmDoTags is counted, its tag not kept.
enum { pmDoTags = 32 };
static __thread uintptr_t pm_doTags[pmDoTags];
static __thread int pm_doDepth;
// cuCtxPushCurrent_v2(ctx), and on success the Do of tag noted on the thread.
static int pm_doPush(uintptr_t push, uintptr_t ctx, uintptr_t tag) {
	int r = ((int (*)(void *))push)((void *)ctx);
	if (r == 0) {
		if (pm_doDepth < pmDoTags) pm_doTags[pm_doDepth] = tag;
		pm_doDepth++;
	}
	return r;
}
// cuCtxPopCurrent_v2, and the thread's innermost Do forgotten, whatever the pop says.
static int pm_doPop(uintptr_t pop) {
	void *c = NULL;
	int r = ((int (*)(void **))pop)(&c);
	if (pm_doDepth > 0) pm_doDepth--;
	return r;
}
// Whether a Do of tag is under way on this thread.
static int pm_inDo(uintptr_t tag) {
	for (int i = 0; i < pm_doDepth && i < pmDoTags; i++) if (pm_doTags[i] == tag) return 1;
	return 0;
}
// cuCtxPushCurrent_v2(ctx), then an entry point of one handle (a; two: of two, a and b), then
// cuCtxPopCurrent_v2: a call in a context in one cgo call, as the thread cannot change under a C
// call. With xchg (cuThreadExchangeStreamCaptureMode), the call runs in the RELAXED capture
// mode, the thread's own restored after. The answer packs where it failed (pmStage*) above the
// CUresult in the low 32 bits: push's, the call's (whatever the pop then says, as Device.Do
// reports it), or pop's.
enum { pmStagePush = 1, pmStageCall = 2, pmStagePop = 3 };
static uint64_t pm_inCtx(uintptr_t push, uintptr_t pop, uintptr_t xchg, uintptr_t ctx, uintptr_t fn, int two, uintptr_t a, uintptr_t b) {
	int r = ((int (*)(void *))push)((void *)ctx);
	if (r != 0) return (uint64_t)pmStagePush << 32 | (uint32_t)r;
	int mode = 2, relaxed = xchg && ((int (*)(int *))xchg)(&mode) == 0; // CU_STREAM_CAPTURE_MODE_RELAXED
	if (two) r = ((int (*)(void *, void *))fn)((void *)a, (void *)b);
	else r = ((int (*)(void *))fn)((void *)a);
	if (relaxed) ((int (*)(int *))xchg)(&mode); // the thread's mode back
	void *c = NULL;
	int pr = ((int (*)(void **))pop)(&c);
	if (r != 0) return (uint64_t)pmStageCall << 32 | (uint32_t)r;
	if (pr != 0) return (uint64_t)pmStagePop << 32 | (uint32_t)pr;
	return 0;
}

// cuMemGetInfo_v2
static int pm_memGetInfo(uintptr_t fn, size_t *free, size_t *total) {
	return ((int (*)(size_t *, size_t *))fn)(free, total);
}

// cuMemAlloc_v2
static int pm_memAlloc(uintptr_t fn, pmDevPtr *p, size_t n) {
	return ((int (*)(pmDevPtr *, size_t))fn)(p, n);
}
// cuMemFree_v2, cuMemRelease
static int pm_dptr(uintptr_t fn, pmDevPtr p) { return ((int (*)(pmDevPtr))fn)(p); }
// cuMemAllocAsync
static int pm_memAllocAsync(uintptr_t fn, pmDevPtr *p, size_t n, uintptr_t s) {
	return ((int (*)(pmDevPtr *, size_t, void *))fn)(p, n, (void *)s);
}
// cuMemFreeAsync
static int pm_memFreeAsync(uintptr_t fn, pmDevPtr p, uintptr_t s) {
	return ((int (*)(pmDevPtr, void *))fn)(p, (void *)s);
}
// cuMemAllocManaged
static int pm_memAllocManaged(uintptr_t fn, pmDevPtr *p, size_t n, unsigned flags) {
	return ((int (*)(pmDevPtr *, size_t, unsigned))fn)(p, n, flags);
}
// cuMemHostAlloc
static int pm_memHostAlloc(uintptr_t fn, uintptr_t *p, size_t n, unsigned flags) {
	void *h = NULL;
	int r = ((int (*)(void **, size_t, unsigned))fn)(&h, n, flags);
	*p = (uintptr_t)h;
	return r;
}
// cuMemHostRegister_v2
static int pm_memHostRegister(uintptr_t fn, uintptr_t p, size_t n, unsigned flags) {
	return ((int (*)(void *, size_t, unsigned))fn)((void *)p, n, flags);
}
// cuMemHostGetDevicePointer_v2 (flags must be 0)
static int pm_memHostGetDevicePointer(uintptr_t fn, pmDevPtr *d, uintptr_t p) {
	return ((int (*)(pmDevPtr *, void *, unsigned))fn)(d, (void *)p, 0);
}
// cuMemsetD8_v2
static int pm_memsetD8(uintptr_t fn, pmDevPtr p, unsigned char v, size_t n) {
	return ((int (*)(pmDevPtr, unsigned char, size_t))fn)(p, v, n);
}
// cuMemsetD8Async
static int pm_memsetD8Async(uintptr_t fn, pmDevPtr p, unsigned char v, size_t n, uintptr_t s) {
	return ((int (*)(pmDevPtr, unsigned char, size_t, void *))fn)(p, v, n, (void *)s);
}
// cuMemcpyHtoD_v2
static int pm_memcpyHtoD(uintptr_t fn, pmDevPtr dst, uintptr_t src, size_t n) {
	return ((int (*)(pmDevPtr, const void *, size_t))fn)(dst, (const void *)src, n);
}
// cuMemcpyDtoH_v2
static int pm_memcpyDtoH(uintptr_t fn, uintptr_t dst, pmDevPtr src, size_t n) {
	return ((int (*)(void *, pmDevPtr, size_t))fn)((void *)dst, src, n);
}
// cuMemcpyDtoD_v2
static int pm_memcpyDtoD(uintptr_t fn, pmDevPtr dst, pmDevPtr src, size_t n) {
	return ((int (*)(pmDevPtr, pmDevPtr, size_t))fn)(dst, src, n);
}
// cuMemcpyHtoDAsync_v2
static int pm_memcpyHtoDAsync(uintptr_t fn, pmDevPtr dst, uintptr_t src, size_t n, uintptr_t s) {
	return ((int (*)(pmDevPtr, const void *, size_t, void *))fn)(dst, (const void *)src, n, (void *)s);
}
// cuMemcpyDtoHAsync_v2
static int pm_memcpyDtoHAsync(uintptr_t fn, uintptr_t dst, pmDevPtr src, size_t n, uintptr_t s) {
	return ((int (*)(void *, pmDevPtr, size_t, void *))fn)((void *)dst, src, n, (void *)s);
}
// cuMemcpyDtoDAsync_v2
static int pm_memcpyDtoDAsync(uintptr_t fn, pmDevPtr dst, pmDevPtr src, size_t n, uintptr_t s) {
	return ((int (*)(pmDevPtr, pmDevPtr, size_t, void *))fn)(dst, src, n, (void *)s);
}

// cuMemGetAllocationGranularity(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags)
static int pm_memGetAllocationGranularity(uintptr_t fn, size_t *out, int ordinal, int option) {
	pmMemAllocationProp prop = {0};
	prop.type = pmAllocationPinned;
	prop.location.type = pmLocationDevice;
	prop.location.id = ordinal;
	return ((int (*)(size_t *, const pmMemAllocationProp *, int))fn)(out, &prop, option);
}
// cuMemAddressReserve(CUdeviceptr *, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags)
static int pm_memAddressReserve(uintptr_t fn, pmDevPtr *p, size_t size, size_t align) {
	return ((int (*)(pmDevPtr *, size_t, size_t, pmDevPtr, unsigned long long))fn)(p, size, align, 0, 0);
}
// cuMemAddressFree, cuMemUnmap
static int pm_dptrSize(uintptr_t fn, pmDevPtr p, size_t size) {
	return ((int (*)(pmDevPtr, size_t))fn)(p, size);
}
// cuMemCreate(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long flags)
static int pm_memCreate(uintptr_t fn, pmDevPtr *h, size_t size, int ordinal) {
	pmMemAllocationProp prop = {0};
	prop.type = pmAllocationPinned;
	prop.location.type = pmLocationDevice;
	prop.location.id = ordinal;
	return ((int (*)(pmDevPtr *, size_t, const pmMemAllocationProp *, unsigned long long))fn)(h, size, &prop, 0);
}
// cuMemMap(CUdeviceptr, size_t size, size_t offset, CUmemGenericAllocationHandle, unsigned long long flags)
static int pm_memMap(uintptr_t fn, pmDevPtr p, size_t size, pmDevPtr h) {
	return ((int (*)(pmDevPtr, size_t, size_t, pmDevPtr, unsigned long long))fn)(p, size, 0, h, 0);
}
// cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t count)
static int pm_memSetAccess(uintptr_t fn, pmDevPtr p, size_t size, int ordinal) {
	pmMemAccessDesc desc = {0};
	desc.location.type = pmLocationDevice;
	desc.location.id = ordinal;
	desc.flags = pmAccessReadWrite;
	return ((int (*)(pmDevPtr, size_t, const pmMemAccessDesc *, size_t))fn)(p, size, &desc, 1);
}
// cuMemPrefetchAsync_v2(CUdeviceptr, size_t, CUmemLocation, unsigned int flags, CUstream)
static int pm_memPrefetchAsync(uintptr_t fn, pmDevPtr p, size_t n, int locType, int locID, uintptr_t s) {
	pmMemLocation loc = {locType, locID};
	return ((int (*)(pmDevPtr, size_t, pmMemLocation, unsigned, void *))fn)(p, n, loc, 0, (void *)s);
}
// cuMemAdvise_v2(CUdeviceptr, size_t, CUmem_advise, CUmemLocation)
static int pm_memAdvise(uintptr_t fn, pmDevPtr p, size_t n, int advice, int locType, int locID) {
	pmMemLocation loc = {locType, locID};
	return ((int (*)(pmDevPtr, size_t, int, pmMemLocation))fn)(p, n, advice, loc);
}
// cuEventElapsedTime
static int pm_eventElapsed(uintptr_t fn, float *ms, uintptr_t a, uintptr_t b) {
	return ((int (*)(float *, void *, void *))fn)(ms, (void *)a, (void *)b);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/pinmalloc/pinmalloc"
)

// symID names a driver entry point in symbols.
type symID int

const (
	symInit symID = iota
	symDriverGetVersion
	symGetErrorName
	symGetErrorString
	symDeviceGetCount
	symDeviceGet
	symDeviceGetName
	symDeviceTotalMem
	symDeviceGetAttribute
	symPrimaryCtxRetain
	symPrimaryCtxRelease
	symPrimaryCtxGetState
	symCtxPushCurrent
	symCtxPopCurrent
	symCtxSynchronize
	symMemGetInfo
	symMemAlloc
	symMemFree
	symMemAllocAsync
	symMemFreeAsync
	symMemAllocManaged
	symMemHostAlloc
	symMemFreeHost
	symMemHostRegister
	symMemHostUnregister
	symMemHostGetDevicePointer
	symMemsetD8
	symMemsetD8Async
	symMemcpyHtoD
	symMemcpyDtoH
	symMemcpyDtoD
	symMemcpyHtoDAsync
	symMemcpyDtoHAsync
	symMemcpyDtoDAsync
	symMemGetAllocationGranularity
	symMemAddressReserve
	symMemAddressFree
	symMemCreate
	symMemRelease
	symMemMap
	symMemUnmap
	symMemSetAccess
	// Shareable handles of VMM allocations (vmm_share_cgo.go).
	symMemExportToShareableHandle
	symMemImportFromShareableHandle
	symMemPrefetchAsync
	symMemAdvise
	symStreamCreate
	symStreamDestroy
	symStreamSynchronize
	symStreamQuery
	symStreamGetFlags
	symStreamGetCtx
	symEventCreate
	symEventRecord
	symEventQuery
	symEventSynchronize
	symEventElapsedTime
	symEventDestroy
	// Streams, generic copies and kernels (launch_cgo.go).
	symStreamWaitEvent
	symStreamCreateWithPriority
	symCtxGetStreamPriorityRange
	symMemcpyAsync
	symMemcpyBatchAsync
	symModuleLoadData
	symModuleGetFunction
	symModuleUnload
	symLaunchKernel
	// Memory pools (mempool_cgo.go).
	symMemPoolCreate
	symMemPoolDestroy
	symMemPoolSetAttribute
	symMemPoolGetAttribute
	symMemPoolSetAccess
	symMemPoolTrimTo
	symMemAllocFromPoolAsync
	symDeviceGetDefaultMemPool
	// Stream capture (capture_cgo.go).
	symStreamBeginCapture
	symStreamEndCapture
	symStreamIsCapturing
	symGraphDestroy
	symThreadExchangeStreamCaptureMode
	numSyms
)

// symbols lists each entry point: the name asked of cuGetProcAddress_v2 with its API version,
// and the explicitly versioned name looked up with dlsym when that fails. The two must denote
// the same ABI.
var symbols = [numSyms]struct {
	name    string
	version int
	dlsym   string
}{
	symInit:                        {"cuInit", apiVersion, "cuInit"},
	symDriverGetVersion:            {"cuDriverGetVersion", apiVersion, "cuDriverGetVersion"},
	symGetErrorName:                {"cuGetErrorName", apiVersion, "cuGetErrorName"},
	symGetErrorString:              {"cuGetErrorString", apiVersion, "cuGetErrorString"},
	symDeviceGetCount:              {"cuDeviceGetCount", apiVersion, "cuDeviceGetCount"},
	symDeviceGet:                   {"cuDeviceGet", apiVersion, "cuDeviceGet"},
	symDeviceGetName:               {"cuDeviceGetName", apiVersion, "cuDeviceGetName"},
	symDeviceTotalMem:              {"cuDeviceTotalMem", apiVersion, "cuDeviceTotalMem_v2"},
	symDeviceGetAttribute:          {"cuDeviceGetAttribute", apiVersion, "cuDeviceGetAttribute"},
	symPrimaryCtxRetain:            {"cuDevicePrimaryCtxRetain", apiVersion, "cuDevicePrimaryCtxRetain"},
	symPrimaryCtxRelease:           {"cuDevicePrimaryCtxRelease", apiVersion, "cuDevicePrimaryCtxRelease_v2"},
	symPrimaryCtxGetState:          {"cuDevicePrimaryCtxGetState", apiVersion, "cuDevicePrimaryCtxGetState"},
	symCtxPushCurrent:              {"cuCtxPushCurrent", apiVersion, "cuCtxPushCurrent_v2"},
	symCtxPopCurrent:               {"cuCtxPopCurrent", apiVersion, "cuCtxPopCurrent_v2"},
	symCtxSynchronize:              {"cuCtxSynchronize", apiVersion, "cuCtxSynchronize"},
	symMemGetInfo:                  {"cuMemGetInfo", apiVersion, "cuMemGetInfo_v2"},
	symMemAlloc:                    {"cuMemAlloc", apiVersion, "cuMemAlloc_v2"},
	symMemFree:                     {"cuMemFree", apiVersion, "cuMemFree_v2"},
	symMemAllocAsync:               {"cuMemAllocAsync", apiVersion, "cuMemAllocAsync"},
	symMemFreeAsync:                {"cuMemFreeAsync", apiVersion, "cuMemFreeAsync"},
	symMemAllocManaged:             {"cuMemAllocManaged", apiVersion, "cuMemAllocManaged"},
	symMemHostAlloc:                {"cuMemHostAlloc", apiVersion, "cuMemHostAlloc"},
	symMemFreeHost:                 {"cuMemFreeHost", apiVersion, "cuMemFreeHost"},
	symMemHostRegister:             {"cuMemHostRegister", apiVersion, "cuMemHostRegister_v2"},
	symMemHostUnregister:           {"cuMemHostUnregister", apiVersion, "cuMemHostUnregister"},
	symMemHostGetDevicePointer:     {"cuMemHostGetDevicePointer", apiVersion, "cuMemHostGetDevicePointer_v2"},
	symMemsetD8:                    {"cuMemsetD8", apiVersion, "cuMemsetD8_v2"},
	symMemsetD8Async:               {"cuMemsetD8Async", apiVersion, "cuMemsetD8Async"},
	symMemcpyHtoD:                  {"cuMemcpyHtoD", apiVersion, "cuMemcpyHtoD_v2"},
	symMemcpyDtoH:                  {"cuMemcpyDtoH", apiVersion, "cuMemcpyDtoH_v2"},
	symMemcpyDtoD:                  {"cuMemcpyDtoD", apiVersion, "cuMemcpyDtoD_v2"},
	symMemcpyHtoDAsync:             {"cuMemcpyHtoDAsync", apiVersion, "cuMemcpyHtoDAsync_v2"},
	symMemcpyDtoHAsync:             {"cuMemcpyDtoHAsync", apiVersion, "cuMemcpyDtoHAsync_v2"},
	symMemcpyDtoDAsync:             {"cuMemcpyDtoDAsync", apiVersion, "cuMemcpyDtoDAsync_v2"},
	symMemGetAllocationGranularity: {"cuMemGetAllocationGranularity", apiVersion, "cuMemGetAllocationGranularity"},
	symMemAddressReserve:           {"cuMemAddressReserve", apiVersion, "cuMemAddressReserve"},
	symMemAddressFree:              {"cuMemAddressFree", apiVersion, "cuMemAddressFree"},
	symMemCreate:                   {"cuMemCreate", apiVersion, "cuMemCreate"},
	symMemRelease:                  {"cuMemRelease", apiVersion, "cuMemRelease"},
	symMemMap:                      {"cuMemMap", apiVersion, "cuMemMap"},
	symMemUnmap:                    {"cuMemUnmap", apiVersion, "cuMemUnmap"},
	symMemSetAccess:                {"cuMemSetAccess", apiVersion, "cuMemSetAccess"},
	// Shareable handles of VMM allocations (vmm_share_cgo.go).
	symMemExportToShareableHandle:   {"cuMemExportToShareableHandle", apiVersion, "cuMemExportToShareableHandle"},
	symMemImportFromShareableHandle: {"cuMemImportFromShareableHandle", apiVersion, "cuMemImportFromShareableHandle"},
	// The CUmemLocation forms appeared in CUDA 12.2; asking for 12000 would return the
	// CUdevice forms, whose signature differs.
	symMemPrefetchAsync:  {"cuMemPrefetchAsync", 12020, "cuMemPrefetchAsync_v2"},
	symMemAdvise:         {"cuMemAdvise", 12020, "cuMemAdvise_v2"},
	symStreamCreate:      {"cuStreamCreate", apiVersion, "cuStreamCreate"},
	symStreamDestroy:     {"cuStreamDestroy", apiVersion, "cuStreamDestroy_v2"},
	symStreamSynchronize: {"cuStreamSynchronize", apiVersion, "cuStreamSynchronize"},
	symStreamQuery:       {"cuStreamQuery", apiVersion, "cuStreamQuery"},
	symStreamGetFlags:    {"cuStreamGetFlags", apiVersion, "cuStreamGetFlags"},
	// cuStreamGetCtx_v2 (CUDA 12.5) adds a green context's out parameter: version 12000 is v1.
	symStreamGetCtx:     {"cuStreamGetCtx", apiVersion, "cuStreamGetCtx"},
	symEventCreate:      {"cuEventCreate", apiVersion, "cuEventCreate"},
	symEventRecord:      {"cuEventRecord", apiVersion, "cuEventRecord"},
	symEventQuery:       {"cuEventQuery", apiVersion, "cuEventQuery"},
	symEventSynchronize: {"cuEventSynchronize", apiVersion, "cuEventSynchronize"},
	// cuEventElapsedTime and cuEventElapsedTime_v2 (CUDA 12.8) share a signature.
	symEventElapsedTime: {"cuEventElapsedTime", apiVersion, "cuEventElapsedTime"},
	symEventDestroy:     {"cuEventDestroy", apiVersion, "cuEventDestroy_v2"},
	// Streams, generic copies and kernels (launch_cgo.go).
	symStreamWaitEvent:           {"cuStreamWaitEvent", apiVersion, "cuStreamWaitEvent"},
	symStreamCreateWithPriority:  {"cuStreamCreateWithPriority", apiVersion, "cuStreamCreateWithPriority"},
	symCtxGetStreamPriorityRange: {"cuCtxGetStreamPriorityRange", apiVersion, "cuCtxGetStreamPriorityRange"},
	symMemcpyAsync:               {"cuMemcpyAsync", apiVersion, "cuMemcpyAsync"},
	// The CUDA 13.0 form, without the failIdx argument of CUDA 12.8's cuMemcpyBatchAsync. A driver
	// older than 13.0 refuses version 13000 and has no cuMemcpyBatchAsync_v2: ErrSymbol.
	symMemcpyBatchAsync:  {"cuMemcpyBatchAsync", 13000, "cuMemcpyBatchAsync_v2"},
	symModuleLoadData:    {"cuModuleLoadData", apiVersion, "cuModuleLoadData"},
	symModuleGetFunction: {"cuModuleGetFunction", apiVersion, "cuModuleGetFunction"},
	symModuleUnload:      {"cuModuleUnload", apiVersion, "cuModuleUnload"},
	symLaunchKernel:      {"cuLaunchKernel", apiVersion, "cuLaunchKernel"},
	// Memory pools: CUDA 11.2 entry points, unversioned since (a host location needs a 12.6
	// driver, which the call itself refuses before: MemPoolCreate's error).
	symMemPoolCreate:         {"cuMemPoolCreate", apiVersion, "cuMemPoolCreate"},
	symMemPoolDestroy:        {"cuMemPoolDestroy", apiVersion, "cuMemPoolDestroy"},
	symMemPoolSetAttribute:   {"cuMemPoolSetAttribute", apiVersion, "cuMemPoolSetAttribute"},
	symMemPoolGetAttribute:   {"cuMemPoolGetAttribute", apiVersion, "cuMemPoolGetAttribute"},
	symMemPoolSetAccess:      {"cuMemPoolSetAccess", apiVersion, "cuMemPoolSetAccess"},
	symMemPoolTrimTo:         {"cuMemPoolTrimTo", apiVersion, "cuMemPoolTrimTo"},
	symMemAllocFromPoolAsync: {"cuMemAllocFromPoolAsync", apiVersion, "cuMemAllocFromPoolAsync"},
	// The pool cuMemAllocAsync draws from while no other is made current (CUDA 11.2).
	symDeviceGetDefaultMemPool: {"cuDeviceGetDefaultMemPool", apiVersion, "cuDeviceGetDefaultMemPool"},
	// Stream capture: CUDA 10.0 entry points; cuStreamBeginCapture's CUDA 10.1 form, with a
	// mode, is the one exported as cuStreamBeginCapture_v2.
	symStreamBeginCapture: {"cuStreamBeginCapture", apiVersion, "cuStreamBeginCapture_v2"},
	symStreamEndCapture:   {"cuStreamEndCapture", apiVersion, "cuStreamEndCapture"},
	symStreamIsCapturing:  {"cuStreamIsCapturing", apiVersion, "cuStreamIsCapturing"},
	symGraphDestroy:       {"cuGraphDestroy", apiVersion, "cuGraphDestroy"},
	// CUDA 10.1.
	symThreadExchangeStreamCaptureMode: {"cuThreadExchangeStreamCaptureMode", apiVersion, "cuThreadExchangeStreamCaptureMode"},
}

// dlMu serializes the package's dlopen, dlsym and dlclose. Their dlerror text is copied by the
// shim, in the C call that failed (pm_dlmsg): a lock of this package cannot stop another
// library's dl call on the thread, which frees the text, once the goroutine leaves the thread.
var dlMu sync.Mutex

// dlMsgSize bounds the dlerror text kept of a failed dlopen or dlsym; a longer one is cut.
const dlMsgSize = 512

// dlFailed, when set (by tests), runs after a dlopen or dlsym of loadFrom or resolve fails and
// before its message is read, on the same thread: the point where the goroutine may leave the
// thread and another goroutine make a dl call of its own there.
var dlFailed func()

// driver is an opened driver library and its lazily resolved entry points.
type driver struct {
	path    string
	handle  C.uintptr_t
	getProc C.uintptr_t // cuGetProcAddress_v2, or 0 if the driver predates CUDA 12
	syms    [numSyms]struct {
		once sync.Once
		fn   C.uintptr_t
		err  error
	}
}

// cstring returns a NUL-terminated copy of s in Go memory, for the duration of a C call.
func cstring(s string) *C.char {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return (*C.char)(unsafe.Pointer(&b[0]))
}

// loadFrom opens the driver library at path. It does not touch the package's global state, so
// tests can point it at libraries that are not a driver.
func loadFrom(path string) (*driver, error) {
	dlMu.Lock()
	defer dlMu.Unlock()
	var cmsg [dlMsgSize]C.char
	h := C.pm_dlopen(cstring(path), &cmsg[0], C.size_t(len(cmsg)))
	if h == 0 {
		if dlFailed != nil {
			dlFailed()
		}
		msg := C.GoString(&cmsg[0])
		if !strings.Contains(msg, path) { // dlerror names the library; say it once
			msg = path + ": " + msg
		}
		return nil, fmt.Errorf("%w: %s", pinmalloc.ErrNoDriver, msg)
	}
	dr := &driver{path: path, handle: h}
	dr.getProc = C.pm_dlsym(h, cstring("cuGetProcAddress_v2"), nil, 0) // 0 if absent
	return dr, nil
}

// exports reports whether the library exports the C symbol name (dlsym in it alone).
func (dr *driver) exports(name string) bool { return dr.symbol(name) != 0 }

// symbol returns the address of the C symbol name in the library alone, or 0.
func (dr *driver) symbol(name string) C.uintptr_t {
	dlMu.Lock()
	defer dlMu.Unlock()
	return C.pm_dlsym(dr.handle, cstring(name), nil, 0)
}

// close closes the library. Only tests call it, on drivers from loadFrom.
func (dr *driver) close() {
	dlMu.Lock()
	defer dlMu.Unlock()
	C.pm_dlclose(dr.handle)
}

// fn returns the entry point id, resolving it on first use.
func (dr *driver) fn(id symID) (C.uintptr_t, error) {
	s := &dr.syms[id]
	s.once.Do(func() { s.fn, s.err = dr.resolve(id) })
	return s.fn, s.err
}

// resolve finds an entry point: cuGetProcAddress_v2 first, then dlsym of the versioned name.
// It must not format a Result (Result.Error resolves cuGetErrorName through fn).
func (dr *driver) resolve(id symID) (C.uintptr_t, error) {
	e := symbols[id]
	why := "no cuGetProcAddress_v2"
	if dr.getProc != 0 {
		var fn C.uintptr_t
		var status C.int
		r := C.pm_getProcAddress(dr.getProc, cstring(e.name), C.int(e.version), &fn, &status)
		if r == 0 && status == 0 && fn != 0 {
			return fn, nil
		}
		why = fmt.Sprintf("cuGetProcAddress_v2(%s, %d): result %d, status %d", e.name, e.version, int(r), int(status))
	}
	dlMu.Lock()
	defer dlMu.Unlock()
	var cmsg [dlMsgSize]C.char
	if fn := C.pm_dlsym(dr.handle, cstring(e.dlsym), &cmsg[0], C.size_t(len(cmsg))); fn != 0 {
		return fn, nil
	}
	if dlFailed != nil {
		dlFailed()
	}
	return 0, fmt.Errorf("%w: %s in %s (%s; dlsym: %s)", pinmalloc.ErrSymbol, e.dlsym, dr.path, why, C.GoString(&cmsg[0]))
}

// check turns a CUresult into an error. CUDA_ERROR_NOT_READY, the answer of a query of pending
// work on the pools' allocation path, is errNotReady: boxing a Result above 255 allocates.
func check(r C.int) error {
	switch Result(r) {
	case resultSuccess:
		return nil
	case resultNotReady:
		return errNotReady
	}
	return Result(r)
}

// resultText asks the loaded driver for the name and description of r.
func resultText(r Result) (name, desc string, ok bool) {
	dr := loaded.Load()
	if dr == nil {
		return "", "", false
	}
	fName, err1 := dr.fn(symGetErrorName)
	fStr, err2 := dr.fn(symGetErrorString)
	if err1 != nil || err2 != nil {
		return "", "", false
	}
	var cname, cdesc *C.char
	if C.pm_errorText(fName, C.int(r), &cname) != 0 || cname == nil {
		return "", "", false
	}
	if C.pm_errorText(fStr, C.int(r), &cdesc) != 0 || cdesc == nil {
		return "", "", false
	}
	return C.GoString(cname), C.GoString(cdesc), true
}

// Raw calls. Each resolves its entry point and makes one driver call; the Device methods add
// context discipline and accounting.

func (dr *driver) init() error {
	return dr.call(symInit, func(f C.uintptr_t) C.int { return C.pm_u(f, 0) })
}

func (dr *driver) driverVersion() (int, error) {
	var v C.int
	err := dr.call(symDriverGetVersion, func(f C.uintptr_t) C.int { return C.pm_pint(f, &v) })
	return int(v), err
}

func (dr *driver) deviceCount() (int, error) {
	var n C.int
	err := dr.call(symDeviceGetCount, func(f C.uintptr_t) C.int { return C.pm_pint(f, &n) })
	return int(n), err
}

func (dr *driver) deviceGet(ordinal int) (int32, error) {
	var dev C.int
	err := dr.call(symDeviceGet, func(f C.uintptr_t) C.int {
		return C.pm_deviceGet(f, &dev, C.int(ordinal))
	})
	return int32(dev), err
}

func (dr *driver) deviceName(dev int32) (string, error) {
	var buf [256]C.char
	if err := dr.call(symDeviceGetName, func(f C.uintptr_t) C.int {
		return C.pm_deviceGetName(f, &buf[0], C.int(len(buf)), C.int(dev))
	}); err != nil {
		return "", err
	}
	buf[len(buf)-1] = 0
	return C.GoString(&buf[0]), nil
}

func (dr *driver) deviceTotalMem(dev int32) (uintptr, error) {
	var n C.size_t
	err := dr.call(symDeviceTotalMem, func(f C.uintptr_t) C.int {
		return C.pm_deviceTotalMem(f, &n, C.int(dev))
	})
	return uintptr(n), err
}

func (dr *driver) deviceAttribute(dev int32, attr int) (int, error) {
	var v C.int
	err := dr.call(symDeviceGetAttribute, func(f C.uintptr_t) C.int {
		return C.pm_deviceGetAttribute(f, &v, C.int(attr), C.int(dev))
	})
	return int(v), err
}

func (dr *driver) primaryRetain(dev int32) (uintptr, error) {
	var ctx C.uintptr_t
	err := dr.call(symPrimaryCtxRetain, func(f C.uintptr_t) C.int {
		return C.pm_primaryCtxRetain(f, &ctx, C.int(dev))
	})
	return uintptr(ctx), err
}

func (dr *driver) primaryRelease(dev int32) error {
	return dr.call(symPrimaryCtxRelease, func(f C.uintptr_t) C.int {
		return C.pm_int(f, C.int(dev))
	})
}

// primaryActive reports whether dev's primary context is active: retained by someone.
func (dr *driver) primaryActive(dev int32) (bool, error) {
	var active C.int
	err := dr.call(symPrimaryCtxGetState, func(f C.uintptr_t) C.int {
		return C.pm_primaryCtxGetState(f, C.int(dev), &active)
	})
	return active != 0, err
}

// doPush pushes ctx for a Do of the Device tag names, and notes that Do on the thread (inDo)
// until doPop.
func (dr *driver) doPush(ctx, tag uintptr) error {
	return dr.call(symCtxPushCurrent, func(f C.uintptr_t) C.int {
		return C.pm_doPush(f, C.uintptr_t(ctx), C.uintptr_t(tag))
	})
}

// doPop pops the context doPush pushed and ends the note of its Do.
func (dr *driver) doPop() error {
	return dr.call(symCtxPopCurrent, func(f C.uintptr_t) C.int { return C.pm_doPop(f) })
}

// inDo reports whether a Do of the Device tag names is under way on the calling OS thread, so
// on the calling goroutine when it is locked to its thread (as in a Do).
func (dr *driver) inDo(tag uintptr) bool { return C.pm_inDo(C.uintptr_t(tag)) != 0 }

// pushPop resolves cuCtxPushCurrent_v2 and cuCtxPopCurrent_v2, for a call in a context made in
// one cgo call.
func (dr *driver) pushPop() (push, pop C.uintptr_t, err error) {
	if push, err = dr.fn(symCtxPushCurrent); err == nil {
		pop, err = dr.fn(symCtxPopCurrent)
	}
	return push, pop, err
}

// inCtx calls entry point id with handle a (with two, handles a and b) in context ctx, pushed
// before and popped after, in one cgo call: what Device.Do does for a call that needs nothing
// else, at a third of its cost in cgo calls (a stream or event query on a reclaim's path). With
// relaxed, in the RELAXED capture mode (Device.RelaxCapture), where the driver has it.
func (dr *driver) inCtx(ctx uintptr, id symID, relaxed, two bool, a, b uintptr) error {
	push, pop, err := dr.pushPop()
	if err != nil {
		return err
	}
	f, err := dr.fn(id)
	if err != nil {
		return err
	}
	var xchg C.uintptr_t
	if relaxed {
		xchg, _ = dr.fn(symThreadExchangeStreamCaptureMode) // 0 when the driver lacks it
	}
	var n C.int
	if two {
		n = 1
	}
	out := C.pm_inCtx(push, pop, xchg, C.uintptr_t(ctx), f, n, C.uintptr_t(a), C.uintptr_t(b))
	if out == 0 {
		return nil
	}
	r := check(C.int(int32(uint32(out))))
	switch out >> 32 {
	case C.pmStagePush:
		return wrap(r, "push primary context")
	case C.pmStagePop:
		return wrap(r, "pop primary context")
	}
	return r
}

func (dr *driver) ctxSynchronize() error {
	return dr.call(symCtxSynchronize, func(f C.uintptr_t) C.int { return C.pm_void(f) })
}

// call resolves id and calls do with the entry point, turning its CUresult into an error.
func (dr *driver) call(id symID, do func(f C.uintptr_t) C.int) error {
	f, err := dr.fn(id)
	if err != nil {
		return err
	}
	return check(do(f))
}

// callPtr calls an entry point that takes one pointer-sized handle.
func (dr *driver) callPtr(id symID, a uintptr) error {
	return dr.call(id, func(f C.uintptr_t) C.int { return C.pm_ptr(f, C.uintptr_t(a)) })
}

func (dr *driver) memGetInfo() (free, total uintptr, err error) {
	var fr, tot C.size_t
	err = dr.call(symMemGetInfo, func(f C.uintptr_t) C.int { return C.pm_memGetInfo(f, &fr, &tot) })
	return uintptr(fr), uintptr(tot), err
}

func (dr *driver) memAlloc(n uintptr) (DevicePtr, error) {
	var p C.pmDevPtr
	err := dr.call(symMemAlloc, func(f C.uintptr_t) C.int {
		return C.pm_memAlloc(f, &p, C.size_t(n))
	})
	return DevicePtr(p), err
}

func (dr *driver) memFree(p DevicePtr) error {
	return dr.call(symMemFree, func(f C.uintptr_t) C.int { return C.pm_dptr(f, C.pmDevPtr(p)) })
}

func (dr *driver) memAllocAsync(n uintptr, s Stream) (DevicePtr, error) {
	var p C.pmDevPtr
	err := dr.call(symMemAllocAsync, func(f C.uintptr_t) C.int {
		return C.pm_memAllocAsync(f, &p, C.size_t(n), C.uintptr_t(s))
	})
	return DevicePtr(p), err
}

func (dr *driver) memFreeAsync(p DevicePtr, s Stream) error {
	return dr.call(symMemFreeAsync, func(f C.uintptr_t) C.int {
		return C.pm_memFreeAsync(f, C.pmDevPtr(p), C.uintptr_t(s))
	})
}

func (dr *driver) memAllocManaged(n uintptr, flags uint32) (DevicePtr, error) {
	var p C.pmDevPtr
	err := dr.call(symMemAllocManaged, func(f C.uintptr_t) C.int {
		return C.pm_memAllocManaged(f, &p, C.size_t(n), C.unsigned(flags))
	})
	return DevicePtr(p), err
}

func (dr *driver) memHostAlloc(n uintptr, flags uint32) (uintptr, error) {
	var p C.uintptr_t
	err := dr.call(symMemHostAlloc, func(f C.uintptr_t) C.int {
		return C.pm_memHostAlloc(f, &p, C.size_t(n), C.unsigned(flags))
	})
	return uintptr(p), err
}

func (dr *driver) memFreeHost(p uintptr) error { return dr.callPtr(symMemFreeHost, p) }

func (dr *driver) memHostRegister(p, n uintptr, flags uint32) error {
	return dr.call(symMemHostRegister, func(f C.uintptr_t) C.int {
		return C.pm_memHostRegister(f, C.uintptr_t(p), C.size_t(n), C.unsigned(flags))
	})
}

func (dr *driver) memHostUnregister(p uintptr) error { return dr.callPtr(symMemHostUnregister, p) }

func (dr *driver) memHostGetDevicePointer(p uintptr) (DevicePtr, error) {
	var d C.pmDevPtr
	err := dr.call(symMemHostGetDevicePointer, func(f C.uintptr_t) C.int {
		return C.pm_memHostGetDevicePointer(f, &d, C.uintptr_t(p))
	})
	return DevicePtr(d), err
}

func (dr *driver) memsetD8(p DevicePtr, v byte, n uintptr) error {
	return dr.call(symMemsetD8, func(f C.uintptr_t) C.int {
		return C.pm_memsetD8(f, C.pmDevPtr(p), C.uchar(v), C.size_t(n))
	})
}

func (dr *driver) memsetD8Async(p DevicePtr, v byte, n uintptr, s Stream) error {
	return dr.call(symMemsetD8Async, func(f C.uintptr_t) C.int {
		return C.pm_memsetD8Async(f, C.pmDevPtr(p), C.uchar(v), C.size_t(n), C.uintptr_t(s))
	})
}

func (dr *driver) memcpyHtoD(dst DevicePtr, src, n uintptr) error {
	return dr.call(symMemcpyHtoD, func(f C.uintptr_t) C.int {
		return C.pm_memcpyHtoD(f, C.pmDevPtr(dst), C.uintptr_t(src), C.size_t(n))
	})
}

func (dr *driver) memcpyDtoH(dst uintptr, src DevicePtr, n uintptr) error {
	return dr.call(symMemcpyDtoH, func(f C.uintptr_t) C.int {
		return C.pm_memcpyDtoH(f, C.uintptr_t(dst), C.pmDevPtr(src), C.size_t(n))
	})
}

func (dr *driver) memcpyDtoD(dst, src DevicePtr, n uintptr) error {
	return dr.call(symMemcpyDtoD, func(f C.uintptr_t) C.int {
		return C.pm_memcpyDtoD(f, C.pmDevPtr(dst), C.pmDevPtr(src), C.size_t(n))
	})
}

func (dr *driver) memcpyHtoDAsync(dst DevicePtr, src, n uintptr, s Stream) error {
	return dr.call(symMemcpyHtoDAsync, func(f C.uintptr_t) C.int {
		return C.pm_memcpyHtoDAsync(f, C.pmDevPtr(dst), C.uintptr_t(src), C.size_t(n), C.uintptr_t(s))
	})
}

func (dr *driver) memcpyDtoHAsync(dst uintptr, src DevicePtr, n uintptr, s Stream) error {
	return dr.call(symMemcpyDtoHAsync, func(f C.uintptr_t) C.int {
		return C.pm_memcpyDtoHAsync(f, C.uintptr_t(dst), C.pmDevPtr(src), C.size_t(n), C.uintptr_t(s))
	})
}

func (dr *driver) memcpyDtoDAsync(dst, src DevicePtr, n uintptr, s Stream) error {
	return dr.call(symMemcpyDtoDAsync, func(f C.uintptr_t) C.int {
		return C.pm_memcpyDtoDAsync(f, C.pmDevPtr(dst), C.pmDevPtr(src), C.size_t(n), C.uintptr_t(s))
	})
}

func (dr *driver) memGetGranularity(ordinal int, recommended bool) (uintptr, error) {
	option := C.int(0) // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	if recommended {
		option = 1 // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
	}
	var g C.size_t
	err := dr.call(symMemGetAllocationGranularity, func(f C.uintptr_t) C.int {
		return C.pm_memGetAllocationGranularity(f, &g, C.int(ordinal), option)
	})
	return uintptr(g), err
}

func (dr *driver) memAddressReserve(size, align uintptr) (DevicePtr, error) {
	var p C.pmDevPtr
	err := dr.call(symMemAddressReserve, func(f C.uintptr_t) C.int {
		return C.pm_memAddressReserve(f, &p, C.size_t(size), C.size_t(align))
	})
	return DevicePtr(p), err
}

func (dr *driver) memAddressFree(p DevicePtr, size uintptr) error {
	return dr.call(symMemAddressFree, func(f C.uintptr_t) C.int {
		return C.pm_dptrSize(f, C.pmDevPtr(p), C.size_t(size))
	})
}

func (dr *driver) memCreate(size uintptr, ordinal int) (MemHandle, error) {
	var h C.pmDevPtr
	err := dr.call(symMemCreate, func(f C.uintptr_t) C.int {
		return C.pm_memCreate(f, &h, C.size_t(size), C.int(ordinal))
	})
	return MemHandle(h), err
}

func (dr *driver) memRelease(h MemHandle) error {
	return dr.call(symMemRelease, func(f C.uintptr_t) C.int { return C.pm_dptr(f, C.pmDevPtr(h)) })
}

func (dr *driver) memMap(p DevicePtr, size uintptr, h MemHandle) error {
	return dr.call(symMemMap, func(f C.uintptr_t) C.int {
		return C.pm_memMap(f, C.pmDevPtr(p), C.size_t(size), C.pmDevPtr(h))
	})
}

func (dr *driver) memUnmap(p DevicePtr, size uintptr) error {
	return dr.call(symMemUnmap, func(f C.uintptr_t) C.int {
		return C.pm_dptrSize(f, C.pmDevPtr(p), C.size_t(size))
	})
}

func (dr *driver) memSetAccess(p DevicePtr, size uintptr, ordinal int) error {
	return dr.call(symMemSetAccess, func(f C.uintptr_t) C.int {
		return C.pm_memSetAccess(f, C.pmDevPtr(p), C.size_t(size), C.int(ordinal))
	})
}

func (dr *driver) memPrefetchAsync(p DevicePtr, n uintptr, loc MemLocation, s Stream) error {
	return dr.call(symMemPrefetchAsync, func(f C.uintptr_t) C.int {
		return C.pm_memPrefetchAsync(f, C.pmDevPtr(p), C.size_t(n), C.int(loc.Type), C.int(loc.ID), C.uintptr_t(s))
	})
}

func (dr *driver) memAdvise(p DevicePtr, n uintptr, advice int32, loc MemLocation) error {
	return dr.call(symMemAdvise, func(f C.uintptr_t) C.int {
		return C.pm_memAdvise(f, C.pmDevPtr(p), C.size_t(n), C.int(advice), C.int(loc.Type), C.int(loc.ID))
	})
}

// create calls cuStreamCreate or cuEventCreate.
func (dr *driver) create(id symID, flags uint32) (uintptr, error) {
	var h C.uintptr_t
	err := dr.call(id, func(f C.uintptr_t) C.int { return C.pm_create(f, &h, C.unsigned(flags)) })
	return uintptr(h), err
}

func (dr *driver) streamCreate(flags uint32) (Stream, error) {
	return dr.create(symStreamCreate, flags)
}

func (dr *driver) streamDestroy(s Stream) error { return dr.callPtr(symStreamDestroy, s) }

func (dr *driver) streamGetFlags(s Stream) (uint32, error) {
	var fl C.unsigned
	err := dr.call(symStreamGetFlags, func(f C.uintptr_t) C.int { return C.pm_streamGetFlags(f, C.uintptr_t(s), &fl) })
	return uint32(fl), err
}

func (dr *driver) streamGetCtx(s Stream) (uintptr, error) {
	var c C.uintptr_t
	err := dr.call(symStreamGetCtx, func(f C.uintptr_t) C.int { return C.pm_streamGetCtx(f, C.uintptr_t(s), &c) })
	return uintptr(c), err
}

func (dr *driver) streamSynchronize(s Stream) error { return dr.callPtr(symStreamSynchronize, s) }

func (dr *driver) eventCreate(flags uint32) (Event, error) { return dr.create(symEventCreate, flags) }

// streamQueryIn, eventQueryIn and eventRecordIn are streamQuery, eventQuery and eventRecord
// in context ctx, in one cgo call (inCtx); the queries in the RELAXED capture mode when relaxed.
func (dr *driver) streamQueryIn(ctx uintptr, s Stream, relaxed bool) error {
	return dr.inCtx(ctx, symStreamQuery, relaxed, false, s, 0)
}

func (dr *driver) eventQueryIn(ctx uintptr, ev Event, relaxed bool) error {
	return dr.inCtx(ctx, symEventQuery, relaxed, false, ev, 0)
}

func (dr *driver) eventRecordIn(ctx uintptr, ev Event, s Stream) error {
	return dr.inCtx(ctx, symEventRecord, false, true, ev, s)
}

func (dr *driver) eventSynchronize(ev Event) error { return dr.callPtr(symEventSynchronize, ev) }

func (dr *driver) eventDestroy(ev Event) error { return dr.callPtr(symEventDestroy, ev) }

func (dr *driver) eventElapsed(start, end Event) (float32, error) {
	var ms C.float
	err := dr.call(symEventElapsedTime, func(f C.uintptr_t) C.int {
		return C.pm_eventElapsed(f, &ms, C.uintptr_t(start), C.uintptr_t(end))
	})
	return float32(ms), err
}
