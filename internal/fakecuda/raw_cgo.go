//go:build cgo && linux

package fakecuda

// Raw calls into the fake with arguments internal/cuda does not build (host locations, several
// access descriptors, shareable handle types), so the fake's own tests can check its rules
// whatever the cuda package offers. Each runs with the device's primary context current.

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <stdint.h>
#include <stddef.h>

typedef struct { int type; int id; } rawLocation;
typedef struct {
	int type;
	int requestedHandleTypes;
	rawLocation location;
	void *win32HandleMetaData;
	struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; unsigned char reserved[4]; } allocFlags;
} rawProp;
typedef struct { rawLocation location; int flags; } rawAccess;

static uintptr_t raw_sym(uintptr_t ctl, const char *name) {
	Dl_info info;
	if (!dladdr((void *)ctl, &info)) return 0;
	void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!h) return 0;
	void *p = dlsym(h, name);
	dlclose(h);
	return (uintptr_t)p;
}
static int raw_create(uintptr_t fn, unsigned long long *h, size_t size, int lt, int lid, int handleTypes) {
	rawProp p = {0};
	p.type = 1; p.requestedHandleTypes = handleTypes; p.location.type = lt; p.location.id = lid;
	return ((int (*)(unsigned long long *, size_t, const rawProp *, unsigned long long))fn)(h, size, &p, 0);
}
static int raw_release(uintptr_t fn, unsigned long long h) { return ((int (*)(unsigned long long))fn)(h); }
static int raw_streamCreate(uintptr_t fn, uintptr_t *s, unsigned f) {
	void *q = 0;
	int r = ((int (*)(void **, unsigned))fn)(&q, f);
	*s = (uintptr_t)q;
	return r;
}
static int raw_streamDestroy(uintptr_t fn, uintptr_t s) { return ((int (*)(void *))fn)((void *)s); }
static int raw_granularity(uintptr_t fn, size_t *g, int lt, int lid) {
	rawProp p = {0};
	p.type = 1; p.location.type = lt; p.location.id = lid;
	return ((int (*)(size_t *, const rawProp *, int))fn)(g, &p, 0);
}
static int raw_access(uintptr_t fn, unsigned long long p, size_t size, const int *desc, size_t count) {
	rawAccess a[16];
	if (count > 16) return 1;
	for (size_t i = 0; i < count; i++) { a[i].location.type = desc[3*i]; a[i].location.id = desc[3*i+1]; a[i].flags = desc[3*i+2]; }
	return ((int (*)(unsigned long long, size_t, const rawAccess *, size_t))fn)(p, size, a, count);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/pinmalloc/pinmalloc/internal/cuda"
)

func (d *Driver) sym(name string) (C.uintptr_t, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	fn := C.raw_sym(C.uintptr_t(d.lib), cname)
	if fn == 0 {
		return 0, fmt.Errorf("fakecuda: no %s in the fake", name)
	}
	return fn, nil
}

func result(r C.int) error {
	if r != 0 {
		return cuda.Result(r)
	}
	return nil
}

// MemCreate calls cuMemCreate on dev's context for size bytes at loc, asking for the shareable
// handle types given (0 for none).
func (d *Driver) MemCreate(dev *cuda.Device, size uintptr, loc cuda.MemLocation, handleTypes int) (cuda.MemHandle, error) {
	fn, err := d.sym("cuMemCreate")
	if err != nil {
		return 0, err
	}
	var h C.ulonglong
	err = dev.Do(func() error {
		return result(C.raw_create(fn, &h, C.size_t(size), C.int(loc.Type), C.int(loc.ID), C.int(handleTypes)))
	})
	return cuda.MemHandle(h), err
}

// MemRelease calls cuMemRelease on dev's context, for handles from MemCreate (which dev does
// not count).
func (d *Driver) MemRelease(dev *cuda.Device, h cuda.MemHandle) error {
	fn, err := d.sym("cuMemRelease")
	if err != nil {
		return err
	}
	return dev.Do(func() error { return result(C.raw_release(fn, C.ulonglong(h))) })
}

// Granularity calls cuMemGetAllocationGranularity (minimum) for an allocation at loc.
func (d *Driver) Granularity(dev *cuda.Device, loc cuda.MemLocation) (uintptr, error) {
	fn, err := d.sym("cuMemGetAllocationGranularity")
	if err != nil {
		return 0, err
	}
	var g C.size_t
	err = dev.Do(func() error { return result(C.raw_granularity(fn, &g, C.int(loc.Type), C.int(loc.ID))) })
	return uintptr(g), err
}

// MemSetAccess calls cuMemSetAccess on dev's context with the descriptors given.
func (d *Driver) MemSetAccess(dev *cuda.Device, p cuda.DevicePtr, size uintptr, acc ...Access) error {
	fn, err := d.sym("cuMemSetAccess")
	if err != nil {
		return err
	}
	desc := make([]C.int, 3*len(acc)+1)
	for i, a := range acc {
		desc[3*i], desc[3*i+1], desc[3*i+2] = C.int(a.Loc.Type), C.int(a.Loc.ID), C.int(a.Flags)
	}
	return dev.Do(func() error {
		return result(C.raw_access(fn, C.ulonglong(p), C.size_t(size), &desc[0], C.size_t(len(acc))))
	})
}

// ForeignStreamCreate calls cuStreamCreate (non-blocking) on dev's context, and
// ForeignStreamDestroy cuStreamDestroy_v2, as another binding of the driver would: package cuda
// neither counts the stream among dev's nor sees its destroy (cuda.StreamDestroys).
func (d *Driver) ForeignStreamCreate(dev *cuda.Device) (cuda.Stream, error) {
	fn, err := d.sym("cuStreamCreate")
	if err != nil {
		return 0, err
	}
	var s C.uintptr_t
	err = dev.Do(func() error { return result(C.raw_streamCreate(fn, &s, 1)) })
	return cuda.Stream(s), err
}

// ForeignStreamDestroy: see ForeignStreamCreate.
func (d *Driver) ForeignStreamDestroy(dev *cuda.Device, s cuda.Stream) error {
	fn, err := d.sym("cuStreamDestroy_v2")
	if err != nil {
		return err
	}
	return dev.Do(func() error { return result(C.raw_streamDestroy(fn, C.uintptr_t(s))) })
}
