//go:build cgo && linux

package fakecuda

/*
#include <stdint.h>
static long fc_pin_ctl(uintptr_t fn, int op, long a, long b) { return ((long (*)(int, long, long))fn)(op, a, b); }
*/
import "C"

import "sync"

// pinCtlFn is fake_pin_ctl's address in the fake library this process loaded, found once.
var pinCtlFn struct {
	once sync.Once
	fn   C.uintptr_t
}

// pinCtl calls fake_pin_ctl, the controls of the fake's pinning section. It returns -1 where
// no fake is loaded.
func (d *Driver) pinCtl(op int, a, b int64) int64 {
	pinCtlFn.once.Do(func() { pinCtlFn.fn, _ = d.sym("fake_pin_ctl") })
	if pinCtlFn.fn == 0 {
		return -1
	}
	return int64(C.fc_pin_ctl(pinCtlFn.fn, C.int(op), C.long(a), C.long(b)))
}
