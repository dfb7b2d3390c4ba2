// Package cuda is the part of the CUDA driver API that a program using pinmalloc's GPU memory
// needs: open a device, learn its name and memory, make streams and events to order work, and
// match the driver's errors. Everything else (allocation, registration, the virtual memory
// management API, copies) stays inside pinmalloc, behind device.Heap, pinned.Pool and the
// providers of package cudamem, which take the *Device this package opens. Its types (Device,
// DevicePtr, Stream, Event, Location, Advice) are the vocabulary every package of the module
// speaks about CUDA.
//
// # No toolkit at build time
//
// The driver (libcuda.so.1) is loaded with dlopen the first time it is needed: Count, Open or
// DriverVersion. Building needs no cuda.h and no -lcuda; a machine without a driver, or a build
// with CGO_ENABLED=0, gets errors that match ErrNoDriver instead of a link error. The
// environment variable named by LibraryEnv selects another library (a second driver, or a test
// double); a library without cuInit is no driver either (ErrNoDriver, and ErrSymbol naming it).
//
// # Tests without a GPU
//
// Package cuda/cudatest gives a test a Device on pinmalloc's fake driver, built with gcc at test
// time: cudatest.Device(t) runs the test again in a child process whose driver is the fake, with
// controls to hold and complete queued work, shrink device memory and make a driver call fail.
// cudatest.ExecOnFake does the same for a program run where no driver is installed.
//
// # Contexts
//
// A Device holds a retain of the device's primary context: the context the CUDA runtime API,
// PyTorch and CuPy use, so memory and streams pass freely between them and pinmalloc. Every
// call runs on a locked OS thread with that context current; Do runs a function of another
// binding the same way.
//
// # Handles and interop
//
// Device pointers, streams and events are raw driver handles, each a type of its own over
// uintptr (DevicePtr, Stream, Event), so a stream passed where an event or an address is
// expected does not compile, and a handle made by any other CUDA code passes in with one
// conversion and nothing else:
//
//   - cgo: cuda.Stream(uintptr(unsafe.Pointer(cs))) for a CUstream or cudaStream_t cs, and
//     cuda.DevicePtr(dp) for a CUdeviceptr dp (an integer).
//   - gorgonia.org/cu (v0.9.4 and later): cu.DevicePtr is a uintptr, so cuda.DevicePtr(p)
//     and cu.DevicePtr(p) convert both ways. cu.Stream is a struct whose only field is the
//     unexported CUstream; its exported method C returns that handle, a C pointer, so
//     cuda.Stream(uintptr(unsafe.Pointer(s.C()))) is the raw stream. cu has no public way to
//     build a cu.Stream from a raw handle, so streams cross from cu to pinmalloc, not back.
//   - The runtime API's default stream is 0 here too (the legacy default stream).
//
// A stream passed in must belong to the primary context of the same device (with
// gorgonia.org/cu, make it after cu.Device.RetainPrimaryCtx rather than in a context of its own).
//
// # Errors
//
// The sentinel errors are the module's error vocabulary (package pinmalloc) re-exported: the
// values the module's other packages wrap (device.ErrNoDriver is cuda.ErrNoDriver), so
// errors.Is matches whichever package returned the error. A failed driver call's error matches
// the sentinel of its class, and ResultCode gives its CUresult number.
package cuda

import (
	"fmt"

	icuda "github.com/pinmalloc/pinmalloc/internal/cuda"
)

// DevicePtr is a CUDA device address (CUdeviceptr). It is a type of its own over uintptr, the
// representation gorgonia.org/cu's DevicePtr has, so one conversion crosses either way
// (cuda.DevicePtr(p), cu.DevicePtr(p)) and a stream or an event passed where an address is
// expected does not compile.
type DevicePtr uintptr

// Stream is a CUDA stream handle (CUstream, the runtime's cudaStream_t), a type of its own over
// uintptr: cuda.Stream(uintptr(unsafe.Pointer(cs))) from cgo. 0 is the legacy default stream.
type Stream uintptr

// Event is a CUDA event handle (CUevent, the runtime's cudaEvent_t), a type of its own over
// uintptr: cuda.Event(uintptr(unsafe.Pointer(ce))) from cgo.
type Event uintptr

// LibraryEnv names the environment variable that, when set and not empty, gives the path of
// the driver library to load instead of libcuda.so.1. It is read once, when the driver is first
// loaded.
const LibraryEnv = "PINMALLOC_LIBCUDA"

// Count returns the number of CUDA devices. Without a driver it returns 0 and an error
// matching ErrNoDriver; with a driver and no device, 0 and an error matching ErrNoDevice.
func Count() (int, error) { return icuda.Count() }

// DriverVersion returns the CUDA version the driver supports, as 1000*major + 10*minor (13000
// for CUDA 13.0). Without a driver the error matches ErrNoDriver.
func DriverVersion() (int, error) { return icuda.DriverVersion() }

// Device is an open CUDA device: a retain of its primary context. Pass it to device.New,
// uvm.New or the providers of package cudamem (pinned.Options takes the ordinal and opens its
// own), and Close it after them. Its methods are safe for concurrent use, Close included: a call
// in flight when Close begins ends normally before Close gives the retain back, and the calls
// that start after Close began fail with an error matching ErrClosed. A nil or zero Device (the
// usual cause: Open's error ignored) crashes nothing: its methods return an error matching
// ErrNoDriver, Ordinal -1 and Context 0.
type Device struct {
	handle // the binding's device; the module's packages reach it (internal/cuda.Of)
}

// handle is the binding's handle of a device. Embedded under this unexported name it is no
// part of the API, and it gives Device the methods by which internal/cuda alone finds its
// device inside.
type handle = icuda.Handle

// Open initializes the driver (once per process) and opens the device with the given ordinal,
// retaining its primary context. Each Open must be paired with a Close. Without a driver the
// error matches ErrNoDriver; for an ordinal the driver does not have, ErrNoDevice.
func Open(ordinal int) (*Device, error) {
	d, err := icuda.Open(ordinal)
	if err != nil {
		return nil, err
	}
	return &Device{handle: icuda.NewHandle(d)}, nil
}

// in returns the Device inside d, or an error matching ErrNoDriver for a nil or zero d.
func (d *Device) in() (*icuda.Device, error) { return icuda.Of(d) }

// Close releases the primary-context retain taken by Open, once the calls in flight on the Device
// have ended (a synchronize, once its work has); the calls that start meanwhile fail with an error
// matching ErrClosed. It is idempotent: a Close during another returns when that one has released.
// Called in a function given to Do, it cannot wait for that Do: it returns an error matching
// pinmalloc.ErrBusy and closes nothing (nil, without waiting, where a Close made elsewhere has
// begun: that one releases once the Do ends); nor may such a function wait for a Close of its
// Device made elsewhere. Memory allocated on the device is not freed by it: close the heaps, pools
// and arenas first.
func (d *Device) Close() error {
	in, err := d.in()
	if err != nil {
		return err
	}
	return in.Close()
}

// Ordinal returns the device ordinal given to Open; -1 for a nil or zero Device.
func (d *Device) Ordinal() int {
	in, err := d.in()
	if err != nil {
		return -1
	}
	return in.Ordinal()
}

// Name returns the device's name, for example "NVIDIA H100 80GB HBM3".
func (d *Device) Name() (string, error) {
	in, err := d.in()
	if err != nil {
		return "", err
	}
	return in.Name()
}

// TotalMem returns the device's total memory in bytes.
func (d *Device) TotalMem() (int, error) {
	in, err := d.in()
	if err != nil {
		return 0, err
	}
	n, err := in.TotalMem()
	return int(n), err
}

// MemInfo returns the device memory free now and the total, in bytes, as the driver sees them
// (other processes' allocations included).
func (d *Device) MemInfo() (free, total int, err error) {
	in, err := d.in()
	if err != nil {
		return 0, 0, err
	}
	f, t, err := in.MemGetInfo()
	return int(f), int(t), err
}

// Synchronize waits until all work queued in the primary context, on every stream, has
// completed. While any stream of the context captures a CUDA graph, in any capture mode and on
// any thread, the driver refuses it (ErrCapturing) and invalidates that capture.
func (d *Device) Synchronize() error {
	in, err := d.in()
	if err != nil {
		return err
	}
	return in.Synchronize()
}

// Context returns the primary context (CUcontext) as a raw handle, for other bindings; 0 for a
// nil or zero Device.
func (d *Device) Context() uintptr {
	in, err := d.in()
	if err != nil {
		return 0
	}
	return in.Context()
}

// Do runs f on a locked OS thread with the device's primary context current, then restores the
// thread's previous context: the way to call another binding's functions (cgo, gorgonia.org/cu)
// in the context pinmalloc's memory and streams belong to. Calls may nest: the Device's calls
// made in f (a Do included) run even once a racing Close has begun, as Close waits for the Do
// they are part of. Do returns f's error, or the driver's if the context could not be made
// current, or one matching ErrClosed once Close has begun (then f does not run); a nil f gives
// an error matching ErrInvalidValue.
func (d *Device) Do(f func() error) error {
	in, err := d.in()
	if err != nil {
		return err
	}
	if f == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidValue)
	}
	return in.Do(f)
}
