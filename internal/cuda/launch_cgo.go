//go:build cgo && linux

package cuda

// Shims and raw calls for stream dependencies and priorities, generic and batched copies, and
// modules and kernel launches. Same conventions as driver_cgo.go: each shim takes the entry
// point as a uintptr_t and its arguments by value; arrays the driver reads during the call are
// passed as pointers to Go memory that holds no Go pointer. The one driver struct used here,
// CUmemcpyAttributes, is declared with cuda.h's layout (CUDA 12.8 and 13 agree) and checked by
// a static assertion.

/*
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef unsigned long long pmLDevPtr; // CUdeviceptr

typedef struct { int type; int id; } pmLMemLocation; // CUmemLocation

typedef struct {                 // CUmemcpyAttributes (CUmemcpyAttributes_v1)
	int srcAccessOrder;          // CUmemcpySrcAccessOrder
	pmLMemLocation srcLocHint;   // ignored unless managed memory
	pmLMemLocation dstLocHint;
	unsigned int flags;          // CUmemcpyFlags
} pmMemcpyAttributes;

_Static_assert(sizeof(pmMemcpyAttributes) == 24, "CUmemcpyAttributes layout");
_Static_assert(offsetof(pmMemcpyAttributes, flags) == 20, "CUmemcpyAttributes layout");

enum { pmSrcAccessOrderStream = 1 }; // CU_MEMCPY_SRC_ACCESS_ORDER_STREAM

// cuStreamWaitEvent(CUstream, CUevent, unsigned int flags)
static int pm_streamWaitEvent(uintptr_t fn, uintptr_t s, uintptr_t ev, unsigned flags) {
	return ((int (*)(void *, void *, unsigned))fn)((void *)s, (void *)ev, flags);
}
// cuStreamCreateWithPriority(CUstream *, unsigned int flags, int priority)
static int pm_streamCreateWithPriority(uintptr_t fn, uintptr_t *out, unsigned flags, int prio) {
	void *h = NULL;
	int r = ((int (*)(void **, unsigned, int))fn)(&h, flags, prio);
	*out = (uintptr_t)h;
	return r;
}
// cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
static int pm_ctxGetStreamPriorityRange(uintptr_t fn, int *least, int *greatest) {
	return ((int (*)(int *, int *))fn)(least, greatest);
}
// cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t, CUstream): unified addressing tells
// host from device memory.
static int pm_memcpyAsync(uintptr_t fn, pmLDevPtr dst, pmLDevPtr src, size_t n, uintptr_t s) {
	return ((int (*)(pmLDevPtr, pmLDevPtr, size_t, void *))fn)(dst, src, n, (void *)s);
}
// cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
//                       CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream)
// with one attribute for the whole batch: sources read in stream order, default flags.
static int pm_memcpyBatchAsync(uintptr_t fn, pmLDevPtr *dsts, pmLDevPtr *srcs, size_t *sizes,
                               size_t count, unsigned flags, uintptr_t s) {
	pmMemcpyAttributes attr;
	memset(&attr, 0, sizeof attr);
	attr.srcAccessOrder = pmSrcAccessOrderStream;
	attr.flags = flags;
	size_t idx = 0;
	return ((int (*)(pmLDevPtr *, pmLDevPtr *, size_t *, size_t, pmMemcpyAttributes *, size_t *, size_t, void *))fn)(
		dsts, srcs, sizes, count, &attr, &idx, 1, (void *)s);
}
// cuModuleLoadData(CUmodule *, const void *image)
static int pm_moduleLoadData(uintptr_t fn, uintptr_t *out, const char *image) {
	void *m = NULL;
	int r = ((int (*)(void **, const void *))fn)(&m, image);
	*out = (uintptr_t)m;
	return r;
}
// cuModuleGetFunction(CUfunction *, CUmodule, const char *name)
static int pm_moduleGetFunction(uintptr_t fn, uintptr_t *out, uintptr_t mod, const char *name) {
	void *f = NULL;
	int r = ((int (*)(void **, void *, const char *))fn)(&f, (void *)mod, name);
	*out = (uintptr_t)f;
	return r;
}

#define PM_MAX_KERNEL_ARGS 8

// cuLaunchKernel(CUfunction, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes,
//                CUstream, void **kernelParams, void **extra). Every kernel argument travels in
// an 8-byte slot of args (a 4-byte parameter reads the low half: little endian); the driver
// copies the arguments during the call, so the pointer array can live on this stack.
static int pm_launchKernel(uintptr_t fn, uintptr_t f, unsigned gx, unsigned gy, unsigned gz,
                           unsigned bx, unsigned by, unsigned bz, unsigned shmem, uintptr_t s,
                           const uint64_t *args, int nargs) {
	void *params[PM_MAX_KERNEL_ARGS];
	uint64_t vals[PM_MAX_KERNEL_ARGS];
	if (nargs < 0 || nargs > PM_MAX_KERNEL_ARGS) return 1; // CUDA_ERROR_INVALID_VALUE
	for (int i = 0; i < nargs; i++) {
		vals[i] = args[i];
		params[i] = &vals[i];
	}
	return ((int (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **))fn)(
		(void *)f, gx, gy, gz, bx, by, bz, shmem, (void *)s, nargs ? params : NULL, NULL);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/pinmalloc/pinmalloc"
)

// maxKernelArgs is PM_MAX_KERNEL_ARGS.
const maxKernelArgs = C.PM_MAX_KERNEL_ARGS

func (dr *driver) streamWaitEvent(s Stream, ev Event) error {
	return dr.call(symStreamWaitEvent, func(f C.uintptr_t) C.int {
		return C.pm_streamWaitEvent(f, C.uintptr_t(s), C.uintptr_t(ev), 0)
	})
}

func (dr *driver) streamCreateWithPriority(flags uint32, priority int) (Stream, error) {
	var h C.uintptr_t
	err := dr.call(symStreamCreateWithPriority, func(f C.uintptr_t) C.int {
		return C.pm_streamCreateWithPriority(f, &h, C.unsigned(flags), C.int(priorityArg(priority)))
	})
	return Stream(h), err
}

func (dr *driver) streamPriorityRange() (least, greatest int, err error) {
	var l, g C.int
	err = dr.call(symCtxGetStreamPriorityRange, func(f C.uintptr_t) C.int {
		return C.pm_ctxGetStreamPriorityRange(f, &l, &g)
	})
	return int(l), int(g), err
}

func (dr *driver) memcpyAsync(dst, src, n uintptr, s Stream) error {
	return dr.call(symMemcpyAsync, func(f C.uintptr_t) C.int {
		return C.pm_memcpyAsync(f, C.pmLDevPtr(dst), C.pmLDevPtr(src), C.size_t(n), C.uintptr_t(s))
	})
}

// memcpyBatchAsync passes the three arrays to the driver, which reads them during the call.
// Their element types have the size of CUdeviceptr and size_t (checked by the caller).
func (dr *driver) memcpyBatchAsync(dsts, srcs, sizes []uintptr, flags uint32, s Stream) error {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return fmt.Errorf("%w: cuMemcpyBatchAsync needs 64-bit addresses", pinmalloc.ErrNotSupported)
	}
	return dr.call(symMemcpyBatchAsync, func(f C.uintptr_t) C.int {
		return C.pm_memcpyBatchAsync(f,
			(*C.pmLDevPtr)(unsafe.Pointer(&dsts[0])), (*C.pmLDevPtr)(unsafe.Pointer(&srcs[0])),
			(*C.size_t)(unsafe.Pointer(&sizes[0])), C.size_t(len(dsts)), C.unsigned(flags), C.uintptr_t(s))
	})
}

// memcpyBatchSymbol resolves cuMemcpyBatchAsync_v2 and reports whether the driver has it.
func (dr *driver) memcpyBatchSymbol() error {
	_, err := dr.fn(symMemcpyBatchAsync)
	return err
}

func (dr *driver) moduleLoadData(image string) (Module, error) {
	var m C.uintptr_t
	img := cstring(image)
	err := dr.call(symModuleLoadData, func(f C.uintptr_t) C.int { return C.pm_moduleLoadData(f, &m, img) })
	return Module(m), err
}

func (dr *driver) moduleGetFunction(m Module, name string) (Function, error) {
	var fn C.uintptr_t
	cname := cstring(name)
	err := dr.call(symModuleGetFunction, func(f C.uintptr_t) C.int {
		return C.pm_moduleGetFunction(f, &fn, C.uintptr_t(m), cname)
	})
	return Function(fn), err
}

func (dr *driver) moduleUnload(m Module) error { return dr.callPtr(symModuleUnload, m) }

func (dr *driver) launchKernel(fn Function, grid, block Dim3, sharedMem uint32, s Stream, args []uint64) error {
	if len(args) > maxKernelArgs {
		return fmt.Errorf("%w: %d kernel arguments, at most %d", pinmalloc.ErrInvalidValue, len(args), maxKernelArgs)
	}
	var a [maxKernelArgs]C.uint64_t
	for i, v := range args {
		a[i] = C.uint64_t(v)
	}
	return dr.call(symLaunchKernel, func(f C.uintptr_t) C.int {
		return C.pm_launchKernel(f, C.uintptr_t(fn), C.unsigned(grid.X), C.unsigned(grid.Y), C.unsigned(grid.Z),
			C.unsigned(block.X), C.unsigned(block.Y), C.unsigned(block.Z), C.unsigned(sharedMem), C.uintptr_t(s),
			&a[0], C.int(len(args)))
	})
}
