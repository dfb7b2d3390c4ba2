//go:build cgo && linux

package fakecuda

// Raw driver calls for the rules of primary contexts (primary_test.go), made outside any
// cuda.Device: a Device holds a retain for as long as it is open, and refuses every call once
// closed, so neither can show what the driver does once no retain holds a context. They call
// the driver library internal/cuda loaded (the fake, or the real driver on a GPU), found with
// dlopen(RTLD_NOLOAD); the caller locks its goroutine to its OS thread around a push and what
// runs in the context.

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <stddef.h>

typedef unsigned long long u64;

static uintptr_t pr_lib(const char *path) { return (uintptr_t)dlopen(path, RTLD_NOW | RTLD_NOLOAD); }
static uintptr_t pr_sym(uintptr_t h, const char *name) { return (uintptr_t)dlsym((void *)h, name); }

static int pr_retain(uintptr_t fn, uintptr_t *ctx, int dev) {
	void *c = 0;
	int r = ((int (*)(void **, int))fn)(&c, dev);
	*ctx = (uintptr_t)c;
	return r;
}
static int pr_int(uintptr_t fn, int a) { return ((int (*)(int))fn)(a); }
static int pr_ptr(uintptr_t fn, uintptr_t a) { return ((int (*)(void *))fn)((void *)a); }
static int pr_u64(uintptr_t fn, u64 a) { return ((int (*)(u64))fn)(a); }
static int pr_none(uintptr_t fn) { return ((int (*)(void))fn)(); }
static int pr_pop(uintptr_t fn, uintptr_t *ctx) {
	void *c = 0;
	int r = ((int (*)(void **))fn)(&c);
	*ctx = (uintptr_t)c;
	return r;
}
static int pr_state(uintptr_t fn, int dev, int *active) {
	unsigned flags = 0;
	return ((int (*)(int, unsigned *, int *))fn)(dev, &flags, active);
}
static int pr_alloc(uintptr_t fn, u64 *p, size_t n) { return ((int (*)(u64 *, size_t))fn)(p, n); }
static int pr_allocFlags(uintptr_t fn, u64 *p, size_t n, unsigned f) { return ((int (*)(u64 *, size_t, unsigned))fn)(p, n, f); }
static int pr_hostAlloc(uintptr_t fn, uintptr_t *p, size_t n, unsigned f) {
	void *q = 0;
	int r = ((int (*)(void **, size_t, unsigned))fn)(&q, n, f);
	*p = (uintptr_t)q;
	return r;
}
static int pr_register(uintptr_t fn, uintptr_t p, size_t n, unsigned f) { return ((int (*)(void *, size_t, unsigned))fn)((void *)p, n, f); }
static int pr_create(uintptr_t fn, uintptr_t *h, unsigned f) {
	void *q = 0;
	int r = ((int (*)(void **, unsigned))fn)(&q, f);
	*h = (uintptr_t)q;
	return r;
}
static int pr_allocAsync(uintptr_t fn, u64 *p, size_t n, uintptr_t s) { return ((int (*)(u64 *, size_t, void *))fn)(p, n, (void *)s); }
static int pr_freeAsync(uintptr_t fn, u64 p, uintptr_t s) { return ((int (*)(u64, void *))fn)(p, (void *)s); }
static int pr_memset(uintptr_t fn, u64 d, unsigned char v, size_t n) { return ((int (*)(u64, unsigned char, size_t))fn)(d, v, n); }
static int pr_memsetAsync(uintptr_t fn, u64 d, unsigned char v, size_t n, uintptr_t s) {
	return ((int (*)(u64, unsigned char, size_t, void *))fn)(d, v, n, (void *)s);
}
static int pr_dtoh(uintptr_t fn, uintptr_t dst, u64 src, size_t n) { return ((int (*)(void *, u64, size_t))fn)((void *)dst, src, n); }
static int pr_moduleLoad(uintptr_t fn, uintptr_t *m, const char *image) {
	void *q = 0;
	int r = ((int (*)(void **, const void *))fn)(&q, image);
	*m = (uintptr_t)q;
	return r;
}

typedef struct { int type; int id; } prLocation;
typedef struct {
	int type;
	int requestedHandleTypes;
	prLocation location;
	void *win32HandleMetaData;
	struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; unsigned char reserved[4]; } allocFlags;
} prProp;
static int pr_memCreate(uintptr_t fn, u64 *h, size_t size, int dev) {
	prProp p = {0};
	p.type = 1; p.location.type = 1; p.location.id = dev;
	return ((int (*)(u64 *, size_t, const prProp *, u64))fn)(h, size, &p, 0);
}
static int pr_reserve(uintptr_t fn, u64 *p, size_t size) { return ((int (*)(u64 *, size_t, size_t, u64, u64))fn)(p, size, 0, 0, 0); }
static int pr_addressFree(uintptr_t fn, u64 p, size_t size) { return ((int (*)(u64, size_t))fn)(p, size); }
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

// primaryDriver calls the loaded driver library directly.
type primaryDriver struct {
	lib C.uintptr_t
}

// openPrimaryDriver finds the driver library internal/cuda loaded; the driver must be
// initialized (cuda.Count, say) before its calls.
func openPrimaryDriver() (*primaryDriver, error) {
	path := os.Getenv(cuda.LibraryEnv)
	if path == "" {
		path = "libcuda.so.1"
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	h := C.pr_lib(cpath)
	if h == 0 {
		return nil, fmt.Errorf("fakecuda: the driver library %s is not loaded", path)
	}
	return &primaryDriver{lib: h}, nil
}

// fn resolves an entry point; a missing one panics (the test's driver lacks it).
func (p *primaryDriver) fn(name string) C.uintptr_t {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	f := C.pr_sym(p.lib, cname)
	if f == 0 {
		panic("fakecuda: the driver has no " + name)
	}
	return f
}

// Retain is cuDevicePrimaryCtxRetain; Release, cuDevicePrimaryCtxRelease_v2.
func (p *primaryDriver) Retain(dev int) (uintptr, error) {
	var c C.uintptr_t
	r := C.pr_retain(p.fn("cuDevicePrimaryCtxRetain"), &c, C.int(dev))
	return uintptr(c), result(r)
}

func (p *primaryDriver) Release(dev int) error {
	return result(C.pr_int(p.fn("cuDevicePrimaryCtxRelease_v2"), C.int(dev)))
}

// Active is cuDevicePrimaryCtxGetState's answer of whether dev's primary context is active.
func (p *primaryDriver) Active(dev int) (bool, error) {
	var a C.int
	r := C.pr_state(p.fn("cuDevicePrimaryCtxGetState"), C.int(dev), &a)
	return a != 0, result(r)
}

// Push is cuCtxPushCurrent_v2; Pop, cuCtxPopCurrent_v2.
func (p *primaryDriver) Push(ctx uintptr) error {
	return result(C.pr_ptr(p.fn("cuCtxPushCurrent_v2"), C.uintptr_t(ctx)))
}

func (p *primaryDriver) Pop() (uintptr, error) {
	var c C.uintptr_t
	r := C.pr_pop(p.fn("cuCtxPopCurrent_v2"), &c)
	return uintptr(c), result(r)
}

// Synchronize is cuCtxSynchronize.
func (p *primaryDriver) Synchronize() error { return result(C.pr_none(p.fn("cuCtxSynchronize"))) }

// MemAlloc is cuMemAlloc_v2; MemAllocManaged, cuMemAllocManaged (attached globally); MemFree,
// cuMemFree_v2 of either.
func (p *primaryDriver) MemAlloc(n uintptr) (cuda.DevicePtr, error) {
	var d C.u64
	r := C.pr_alloc(p.fn("cuMemAlloc_v2"), &d, C.size_t(n))
	return cuda.DevicePtr(d), result(r)
}

func (p *primaryDriver) MemAllocManaged(n uintptr) (cuda.DevicePtr, error) {
	var d C.u64
	r := C.pr_allocFlags(p.fn("cuMemAllocManaged"), &d, C.size_t(n), 1)
	return cuda.DevicePtr(d), result(r)
}

func (p *primaryDriver) MemFree(d cuda.DevicePtr) error {
	return result(C.pr_u64(p.fn("cuMemFree_v2"), C.u64(d)))
}

// MemHostAlloc is cuMemHostAlloc with no flag; MemFreeHost, cuMemFreeHost.
func (p *primaryDriver) MemHostAlloc(n uintptr) (uintptr, error) {
	var h C.uintptr_t
	r := C.pr_hostAlloc(p.fn("cuMemHostAlloc"), &h, C.size_t(n), 0)
	return uintptr(h), result(r)
}

func (p *primaryDriver) MemFreeHost(h uintptr) error {
	return result(C.pr_ptr(p.fn("cuMemFreeHost"), C.uintptr_t(h)))
}

// MemHostRegister is cuMemHostRegister_v2 with no flag; MemHostUnregister, cuMemHostUnregister.
func (p *primaryDriver) MemHostRegister(h, n uintptr) error {
	return result(C.pr_register(p.fn("cuMemHostRegister_v2"), C.uintptr_t(h), C.size_t(n), 0))
}

func (p *primaryDriver) MemHostUnregister(h uintptr) error {
	return result(C.pr_ptr(p.fn("cuMemHostUnregister"), C.uintptr_t(h)))
}

// MemsetD8 is cuMemsetD8_v2; MemsetD8Async, cuMemsetD8Async; MemcpyDtoH, cuMemcpyDtoH_v2.
func (p *primaryDriver) MemsetD8(d cuda.DevicePtr, v byte, n uintptr) error {
	return result(C.pr_memset(p.fn("cuMemsetD8_v2"), C.u64(d), C.uchar(v), C.size_t(n)))
}

func (p *primaryDriver) MemsetD8Async(d cuda.DevicePtr, v byte, n uintptr, s cuda.Stream) error {
	return result(C.pr_memsetAsync(p.fn("cuMemsetD8Async"), C.u64(d), C.uchar(v), C.size_t(n), C.uintptr_t(s)))
}

// MemcpyDtoH copies into dst, which must not be Go memory.
func (p *primaryDriver) MemcpyDtoH(dst uintptr, src cuda.DevicePtr, n uintptr) error {
	return result(C.pr_dtoh(p.fn("cuMemcpyDtoH_v2"), C.uintptr_t(dst), C.u64(src), C.size_t(n)))
}

// MemAllocAsync is cuMemAllocAsync (the device's default pool); MemFreeAsync, cuMemFreeAsync.
func (p *primaryDriver) MemAllocAsync(n uintptr, s cuda.Stream) (cuda.DevicePtr, error) {
	var d C.u64
	r := C.pr_allocAsync(p.fn("cuMemAllocAsync"), &d, C.size_t(n), C.uintptr_t(s))
	return cuda.DevicePtr(d), result(r)
}

func (p *primaryDriver) MemFreeAsync(d cuda.DevicePtr, s cuda.Stream) error {
	return result(C.pr_freeAsync(p.fn("cuMemFreeAsync"), C.u64(d), C.uintptr_t(s)))
}

// MemCreate is cuMemCreate of size bytes on device dev; MemRelease, cuMemRelease.
func (p *primaryDriver) MemCreate(size uintptr, dev int) (cuda.MemHandle, error) {
	var h C.u64
	r := C.pr_memCreate(p.fn("cuMemCreate"), &h, C.size_t(size), C.int(dev))
	return cuda.MemHandle(h), result(r)
}

func (p *primaryDriver) MemRelease(h cuda.MemHandle) error {
	return result(C.pr_u64(p.fn("cuMemRelease"), C.u64(h)))
}

// MemAddressReserve is cuMemAddressReserve of size bytes; MemAddressFree, cuMemAddressFree.
func (p *primaryDriver) MemAddressReserve(size uintptr) (cuda.DevicePtr, error) {
	var d C.u64
	r := C.pr_reserve(p.fn("cuMemAddressReserve"), &d, C.size_t(size))
	return cuda.DevicePtr(d), result(r)
}

func (p *primaryDriver) MemAddressFree(d cuda.DevicePtr, size uintptr) error {
	return result(C.pr_addressFree(p.fn("cuMemAddressFree"), C.u64(d), C.size_t(size)))
}

// StreamCreate is cuStreamCreate (non-blocking); StreamQuery, StreamDestroy: cuStreamQuery,
// cuStreamDestroy_v2.
func (p *primaryDriver) StreamCreate() (cuda.Stream, error) {
	var h C.uintptr_t
	r := C.pr_create(p.fn("cuStreamCreate"), &h, 1)
	return cuda.Stream(h), result(r)
}

func (p *primaryDriver) StreamQuery(s cuda.Stream) error {
	return result(C.pr_ptr(p.fn("cuStreamQuery"), C.uintptr_t(s)))
}

func (p *primaryDriver) StreamDestroy(s cuda.Stream) error {
	return result(C.pr_ptr(p.fn("cuStreamDestroy_v2"), C.uintptr_t(s)))
}

// EventCreate is cuEventCreate (timing disabled); EventCreateFlags, cuEventCreate with the
// flags given (CU_EVENT_*); EventQuery, EventDestroy: cuEventQuery, cuEventDestroy_v2.
func (p *primaryDriver) EventCreate() (cuda.Event, error) { return p.EventCreateFlags(2) }

func (p *primaryDriver) EventCreateFlags(flags uint32) (cuda.Event, error) {
	var h C.uintptr_t
	r := C.pr_create(p.fn("cuEventCreate"), &h, C.unsigned(flags))
	return cuda.Event(h), result(r)
}

func (p *primaryDriver) EventQuery(e cuda.Event) error {
	return result(C.pr_ptr(p.fn("cuEventQuery"), C.uintptr_t(e)))
}

func (p *primaryDriver) EventDestroy(e cuda.Event) error {
	return result(C.pr_ptr(p.fn("cuEventDestroy_v2"), C.uintptr_t(e)))
}

// ModuleLoadData is cuModuleLoadData of a PTX image; ModuleUnload, cuModuleUnload.
func (p *primaryDriver) ModuleLoadData(ptx string) (uintptr, error) {
	img := C.CString(ptx)
	defer C.free(unsafe.Pointer(img))
	var m C.uintptr_t
	r := C.pr_moduleLoad(p.fn("cuModuleLoadData"), &m, img)
	return uintptr(m), result(r)
}

func (p *primaryDriver) ModuleUnload(m uintptr) error {
	return result(C.pr_ptr(p.fn("cuModuleUnload"), C.uintptr_t(m)))
}
