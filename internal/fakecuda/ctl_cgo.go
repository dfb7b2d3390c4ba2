//go:build cgo && linux

package fakecuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

static uintptr_t fc_open(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	return h ? (uintptr_t)dlsym(h, "fake_ctl") : 0;
}
static long fc_ctl(uintptr_t fn, int op, long a, long b) { return ((long (*)(int, long, long))fn)(op, a, b); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

const cgoEnabled = true

// handle is fake_ctl's address in the fake library.
type handle C.uintptr_t

// open finds fake_ctl in the library at path: the same library the cuda package loads, since
// dlopen of the same file returns the same handle.
func open(path string) (*Driver, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	fn := C.fc_open(cpath)
	if fn == 0 {
		return nil, fmt.Errorf("cannot load fake_ctl from %s", path)
	}
	return &Driver{lib: handle(fn)}, nil
}

func (d *Driver) ctl(op int, a, b int64) int64 {
	return int64(C.fc_ctl(C.uintptr_t(d.lib), C.int(op), C.long(a), C.long(b)))
}
