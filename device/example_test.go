package device_test

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
)

// Streams and device pointers cross the API as raw handles: cuda.Stream and cuda.DevicePtr are
// uintptr, the representation of a CUstream and a CUdeviceptr. A program that drives the GPU
// through another binding passes its own streams and uses the pointers as its own:
//
//	// cgo: cs is a C.CUstream (a C pointer) made with cuStreamCreate.
//	stream := cuda.Stream(uintptr(unsafe.Pointer(cs)))
//	// gorgonia.org/cu v0.9.4 or later: cu.Stream is a struct; its C method returns the CUstream.
//	stream := cuda.Stream(uintptr(unsafe.Pointer(s.C())))
//	// Device pointers go back as cu.DevicePtr(p), or as a C.CUdeviceptr(p).
//
// Here the "other binding" is the cuda package itself: the stream is created there and handed
// over as a bare uintptr. It needs a GPU, so it has no output to check.
func Example_streamInterop() {
	dev, err := cuda.Open(0)
	if err != nil {
		fmt.Println("no GPU:", err) // errors.Is(err, cuda.ErrNoDriver) on a machine without one
		return
	}
	defer dev.Close() // after the heap's Close: deferred calls run last first

	var myStream cuda.Stream // a CUstream from any binding; 0 would be the legacy default stream
	if myStream, err = dev.StreamCreate(cuda.StreamNonBlocking); err != nil {
		fmt.Println(err)
		return
	}
	defer dev.StreamDestroy(myStream)

	h, err := device.New(dev, device.Options{Capacity: 256 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer h.Close()
	defer h.ForgetStream(cuda.Stream(myStream)) // before the stream is destroyed

	p, err := h.Alloc(1<<20, cuda.Stream(uintptr(myStream)))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := h.HtoD(p, make([]byte, 1<<10)); err != nil { // HtoDAsync wants a pinned buffer
		fmt.Println(err)
	}
	// ... launch kernels on myStream that use p (a CUdeviceptr) ...
	if err := h.FreeAsync(p, myStream); err != nil { // reusable at once by later work on myStream
		fmt.Println(err)
	}
	if err := h.Sync(); err != nil {
		fmt.Println(err)
	}
}

// A block that work outside the heap's streams reads or writes (a network transfer, say) is
// held for that work: the user's Free, made whenever the user is done with the block, then
// takes effect at the work's end, so the memory is never handed out while the work may still
// touch it. It needs a GPU, so it has no output to check.
func ExampleHeap_Hold() {
	h, err := device.Open(0, device.Options{Capacity: 64 << 20})
	if err != nil {
		fmt.Println("no GPU:", err)
		return
	}
	defer h.Close()

	p, err := h.Alloc(1<<20, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	hold, err := h.Hold(p) // the outside work starts: it reads or writes p until Release
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := h.Free(p); err != nil { // returns at once: p stays allocated, held
		fmt.Println(err)
	}
	// ... the outside work ends ...
	if err := hold.Release(); err != nil { // the last hold: the Free takes effect now
		fmt.Println(err)
	}
}
