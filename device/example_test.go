package device_test

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/device"
)

// Streams and device pointers cross the API as raw handles: cuda.Stream and cuda.DevicePtr are
// uintptr, the representation of a CUstream and a CUdeviceptr. A program that drives the GPU
// through another binding passes its own streams and uses the pointers as its own:
//
//	// cgo: cs is a C.CUstream made with cuStreamCreate.
//	stream := cuda.Stream(uintptr(unsafe.Pointer(cs)))
//	// gorgonia.org/cu: the stream's CUstream, converted the same way; device pointers go
//	// back as cu.DevicePtr(p).
//
// This example uses the legacy default stream, handle 0. It needs a GPU, so it has no
// output to check.
func Example_streamInterop() {
	h, err := device.Open(0, device.Options{})
	if err != nil {
		fmt.Println("no GPU:", err) // errors.Is(err, cuda.ErrNoDriver) on a machine without one
		return
	}
	defer h.Close()

	var myStream uintptr // a CUstream from any binding; 0 is the legacy default stream
	p, err := h.Alloc(1<<20, myStream)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := h.HtoD(p, make([]byte, 1<<10)); err != nil { // HtoDAsync wants a pinned buffer
		fmt.Println(err)
	}
	// ... launch kernels on myStream that use p ...
	if err := h.FreeAsync(p, myStream); err != nil { // reusable at once by later work on myStream
		fmt.Println(err)
	}
	if err := h.Sync(); err != nil {
		fmt.Println(err)
	}
}
