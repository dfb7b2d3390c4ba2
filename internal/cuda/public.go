package cuda

import (
	"fmt"
	"sync"
)

// The public package github.com/pinmalloc/pinmalloc/cuda wraps Device in a type of its own with
// a small, documented method set, so that programs outside the module can open a device and
// hand it to device.New or the arena providers without this package's raw binding showing in
// their API. The module's packages take the public type and need the Device inside it; the
// public type has no exported way to give it out, so the public package registers, in its
// init, the two conversions below. This package is internal, so nothing outside the module can
// call them.
//
// Each Device has at most one public wrapper, made on first use and kept in the Device, so a
// Device converted back and forth (device.New(dev), then Heap.Device()) is the same pointer
// the program holds.

var (
	publicMu sync.Mutex
	wrapFn   func(*Device) any
	unwrapFn func(any) (*Device, bool)
)

// RegisterPublic installs the conversions between Device and the public package's type. The
// public package calls it once, in its init; a second call panics, as that is a bug.
func RegisterPublic(wrap func(*Device) any, unwrap func(any) (*Device, bool)) {
	publicMu.Lock()
	defer publicMu.Unlock()
	if wrapFn != nil {
		panic("cuda: RegisterPublic called twice")
	}
	wrapFn, unwrapFn = wrap, unwrap
}

// Public returns the public wrapper of d (a *cuda.Device of the public package), the same one
// every time; nil for a nil d. It panics if the public package is not linked in, which cannot
// happen in a caller that converts the result to the public type.
func Public(d *Device) any {
	if d == nil {
		return nil
	}
	publicMu.Lock()
	defer publicMu.Unlock()
	if wrapFn == nil {
		panic("cuda: the public cuda package is not linked in")
	}
	if d.public == nil {
		d.public = wrapFn(d)
	}
	return d.public
}

// Internal returns the Device inside x, a *cuda.Device of the public package. A nil or zero x,
// or one of another type, gives an error wrapping ErrNoDriver, as the module's constructors
// always reported a missing device (the usual cause is an ignored error from Open on a machine
// without a driver).
func Internal(x any) (*Device, error) {
	publicMu.Lock()
	unwrap := unwrapFn
	publicMu.Unlock()
	if unwrap != nil {
		if d, ok := unwrap(x); ok && d != nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: no CUDA device given (open one with cuda.Open)", ErrNoDriver)
}
