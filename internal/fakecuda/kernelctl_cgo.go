//go:build cgo && linux

package fakecuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

static uintptr_t fc_kernel_open(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	return h ? (uintptr_t)dlsym(h, "fake_kernel_ctl") : 0;
}
static long fc_kernel_ctl(uintptr_t fn, int op, long a, long b) { return ((long (*)(int, long, long))fn)(op, a, b); }
*/
import "C"

import (
	"os"
	"sync"
	"unsafe"
)

// kernelCtl is fake_kernel_ctl's address in the fake library this process loaded, found once.
var kernelCtl struct {
	once sync.Once
	fn   C.uintptr_t
}

// kctl calls fake_kernel_ctl, the controls of the fake's copy and kernel section. It returns -1
// where no fake is loaded.
func (d *Driver) kctl(op int, a, b int64) int64 {
	kernelCtl.once.Do(func() {
		path := os.Getenv(childEnv)
		if path == "" || path == noDriver {
			return
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		kernelCtl.fn = C.fc_kernel_open(cpath)
	})
	if kernelCtl.fn == 0 {
		return -1
	}
	return int64(C.fc_kernel_ctl(kernelCtl.fn, C.int(op), C.long(a), C.long(b)))
}
