package cuda

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc"
)

// # The public device and this binding
//
// The public package github.com/pinmalloc/pinmalloc/cuda gives programs a Device of its own with
// a small, documented method set, and the module's packages (device, pinned, uvm, cudamem) take
// that public type and need the Device of this binding inside it. Go has no friend packages, so
// the link is made with types alone: the public Device embeds a Handle under an unexported
// name, and embedding it gives the public type Handle's unexported methods. Those methods belong
// to this package, so only this package can name them: Of (public to binding) and Wrap (binding
// to public) are generic over the public type, satisfied by it and by nothing outside the
// module, which cannot name Handle to embed it. The public package's Open makes its Device
// with NewHandle. No registration at init, no `any`, and this package imports nothing above
// it.

// Handle is the binding's Device as the public cuda.Device holds it, embedded. Its zero value
// holds no device.
type Handle struct{ d *Device }

// NewHandle returns the Handle of d, for the public package's Open.
func NewHandle(d *Device) Handle { return Handle{d} }

// binding returns the Device the handle holds, nil for none.
func (h *Handle) binding() *Device { return h.d }

// bind makes the handle hold d.
func (h *Handle) bind(d *Device) { h.d = d }

// public is the constraint met by *cuda.Device of the public package: a pointer to a type that
// embeds a Handle.
type public[T any] interface {
	*T
	binding() *Device
	bind(*Device)
}

// Wrap returns a new public device (P is *cuda.Device) holding d, for code of the module that
// opened d through this binding (tests on the fake driver, the benchmarks) and hands it to the
// public API. Wrappers of one d share it: closing one closes d.
func Wrap[P public[T], T any](d *Device) P {
	p := P(new(T))
	p.bind(d)
	return p
}

// Of returns the Device inside pub, a *cuda.Device of the public package: the one way from the
// public type to this binding. A nil or zero pub gives an error wrapping ErrNoDriver, as the
// module's constructors always reported a missing device (the usual cause is an ignored error
// from Open on a machine without a driver).
func Of[P public[T], T any](pub P) (*Device, error) {
	if pub != nil {
		if d := pub.binding(); d != nil {
			return d, nil
		}
	}
	return nil, fmt.Errorf("%w: no CUDA device given (open one with cuda.Open)", pinmalloc.ErrNoDriver)
}

// Closed reports whether Close was called, for the public Device's String.
func (d *Device) Closed() bool { return d.closed.Load() }
