package cuda_test

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/cuda"
)

// Open a device, learn its name and memory, and order work on two streams with an event. It
// needs a GPU, so it has no output to check; on a machine without one it prints why.
func Example() {
	dev, err := cuda.Open(0)
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		fmt.Println("no GPU:", err)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	name, _ := dev.Name()
	free, total, _ := dev.MemInfo()
	fmt.Printf("%s: %d of %d MiB free\n", name, free>>20, total>>20)

	// A copy stream at the least priority (on current GPUs the default one: it yields to streams
	// raised above it, and ties with default ones), and a compute stream.
	least, _, err := dev.StreamPriorityRange()
	if err != nil {
		fmt.Println(err)
		return
	}
	copies, err := dev.StreamCreateWithPriority(cuda.StreamNonBlocking, least)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.StreamDestroy(copies)
	compute, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.StreamDestroy(compute)

	ready, err := dev.EventCreate()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.EventDestroy(ready)
	// ... queue uploads on copies ...
	_ = dev.EventRecord(ready, copies)
	_ = dev.StreamWaitEvent(compute, ready) // kernels queued on compute from now on see the uploads
	// ... queue kernels on compute ...
	if err := dev.StreamSynchronize(compute); err != nil {
		fmt.Println(err)
	}
}

// Streams, events and device pointers are types of their own over uintptr, so a handle made by
// other CUDA code passes in with one conversion:
//
//	// cgo: cs is a C.CUstream (a C pointer) from cuStreamCreate or cudaStreamCreate.
//	s := cuda.Stream(uintptr(unsafe.Pointer(cs)))
//	// gorgonia.org/cu v0.9.4 or later: cu.Stream is a struct; its C method returns the CUstream.
//	s := cuda.Stream(uintptr(unsafe.Pointer(cuStream.C())))
//	// gorgonia.org/cu's DevicePtr is a uintptr, both ways.
//	p := cuda.DevicePtr(cuPtr)  // and cu.DevicePtr(p) back
//
// The stream must belong to the device's primary context (the runtime API's; with
// gorgonia.org/cu, one made after Device.RetainPrimaryCtx). This example stands in for the other
// binding with a stream of its own, held as the other code would hold it.
func Example_interop() {
	dev, err := cuda.Open(0)
	if err != nil {
		fmt.Println("no GPU:", err)
		return
	}
	defer dev.Close()
	theirs, err := dev.StreamCreate(cuda.StreamDefault) // "made by other CUDA code"
	if err != nil {
		fmt.Println(err)
		return
	}
	var handle uintptr = uintptr(theirs) // what the other binding hands over: a raw CUstream

	s := cuda.Stream(handle) // no copy, no lookup: the same handle
	if err := dev.StreamQuery(s); err != nil && !errors.Is(err, cuda.ErrNotReady) {
		fmt.Println("the driver does not know the stream:", err) // ErrInvalidHandle
	}
	// Run the other binding's own calls in the context pinmalloc's streams belong to.
	_ = dev.Do(func() error { return nil /* e.g. a cgo call that launches a kernel on s */ })
	if err := dev.StreamDestroy(theirs); err != nil {
		fmt.Println(err)
	}
}

// Stream, Event and DevicePtr are distinct types over uintptr: a stream passed where an event
// is expected (dev.EventRecord(stream, event)) does not compile, and a raw handle from cgo or
// another binding crosses in one conversion each way, keeping its value.
func Example_handles() {
	var raw uintptr = 0x7f3a10 // a CUstream from cgo or another binding, as an integer
	s := cuda.Stream(raw)
	var p cuda.DevicePtr = 0x7f0000200000 // a CUdeviceptr
	fmt.Printf("stream %#x, back %#x, address %#x\n", s, uintptr(s), uintptr(p+0x100))
	// Output: stream 0x7f3a10, back 0x7f3a10, address 0x7f0000200100
}

// The handles print as what they are; the integer verbs still give the raw value.
func ExampleStream_String() {
	s, p := cuda.Stream(0x55d1c3a0), cuda.DevicePtr(0x7f3a00200000)
	fmt.Println(s, cuda.Stream(0))
	fmt.Println(p)
	fmt.Printf("%#x %d\n", s, p)
	// Output:
	// stream 0x55d1c3a0 stream 0 (legacy default)
	// 0x7f3a00200000
	// 0x55d1c3a0 139887086927872
}
