//go:build cgo && linux

package fakecuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

static uintptr_t fc_cost_open(const char *path) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	return h ? (uintptr_t)dlsym(h, "fake_cost_ctl") : 0;
}
static long fc_cost_ctl(uintptr_t fn, int op, long a, long b) { return ((long (*)(int, long, long))fn)(op, a, b); }
*/
import "C"

import (
	"os"
	"sync"
	"unsafe"
)

// costCtl is fake_cost_ctl's address in the fake library this process loaded, found once.
var costCtl struct {
	once sync.Once
	fn   C.uintptr_t
}

// cctl calls fake_cost_ctl, the controls of the fake's timing model. It returns -1
// where no fake is loaded.
func (d *Driver) cctl(op int, a, b int64) int64 {
	costCtl.once.Do(func() {
		path := os.Getenv(childEnv)
		if path == "" || path == noDriver {
			return
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		costCtl.fn = C.fc_cost_open(cpath)
	})
	if costCtl.fn == 0 {
		return -1
	}
	return int64(C.fc_cost_ctl(costCtl.fn, C.int(op), C.long(a), C.long(b)))
}
