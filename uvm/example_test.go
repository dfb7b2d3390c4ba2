package uvm_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pinmalloc/pinmalloc/cuda"
	"github.com/pinmalloc/pinmalloc/device"
	"github.com/pinmalloc/pinmalloc/pinned"
	"github.com/pinmalloc/pinmalloc/uvm"
)

// A tier sharing a device heap with the rest of a program: blocks beyond the budget live in
// pinned host memory and come back when acquired, in stream order; when the program's own
// allocations find the heap full, the tier evicts cold blocks for them. It needs a GPU, so it
// has no output to check.
func Example_sharedHeap() {
	dev, err := cuda.Open(0)
	if err != nil {
		fmt.Println("no GPU:", err)
		return
	}
	defer dev.Close()
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.StreamDestroy(s)

	heap, err := device.New(dev, device.Options{Capacity: 1 << 30, Align: 256, PurgeDelay: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer heap.Close() // after the tier's Close
	tier, err := uvm.New(dev, uvm.Options{DeviceBudget: 768 << 20, Heap: heap})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tier.Close()

	// 2 GiB of 1 MiB blocks, filled from Go: most of them end up on the host.
	blocks := make([]uvm.Handle, 2048)
	for i := range blocks {
		if blocks[i], err = tier.Alloc(1 << 20); err != nil {
			fmt.Println(err)
			return
		}
		buf, err := tier.AcquireHost(blocks[i], uvm.Write)
		if err != nil {
			fmt.Println(err)
			return
		}
		buf[0] = byte(i)
		_ = tier.ReleaseHost(blocks[i])
	}
	// Use a few on the device: a kernel launched on s after Acquire sees the bytes.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, h := range blocks[:64] {
		p, err := tier.AcquireContext(ctx, h, s, uvm.Read) // waits if all the budget is acquired
		if err != nil {
			fmt.Println(err)
			return
		}
		_ = p // launch work that reads p on s here
		_ = tier.Release(h, s)
	}
	// The program's own 512 MiB: the heap asks the tier to make room.
	scratch, err := heap.Alloc(512<<20, s)
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = heap.FreeAsync(scratch, s)
	_ = heap.ForgetStream(s)
	st := tier.Stats()
	fmt.Printf("mover %s, hit rate %.2f, %d blocks evicted for the heap\n", st.Mover, st.HitRate(), st.Out[uvm.CauseHeapPressure].Blocks)
	for _, h := range blocks {
		_ = tier.Free(h)
	}
}

// A tier whose host buffers come from the program's own pinned pool, under one quota: the
// pool gives the tier what the program leaves, and an eviction it refuses drops the host
// copies of clean blocks first. It needs a GPU, so it has no output to check.
func Example_hostPool() {
	dev, err := cuda.Open(0)
	if err != nil {
		fmt.Println("no GPU:", err)
		return
	}
	defer dev.Close()
	pool, err := pinned.New(pinned.Options{Backend: pinned.CUDAHost, Capacity: 4 << 30, Quota: 2 << 30})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close() // after the tier's Close
	tier, err := uvm.New(dev, uvm.Options{DeviceBudget: 512 << 20, HostPool: pool})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tier.Close()
	h, err := tier.Alloc(1 << 20)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := tier.Evict([]uvm.Handle{h}); errors.Is(err, uvm.ErrHostFull) {
		fmt.Println("the pool's quota is used up:", err)
	}
	_ = tier.Free(h)
}
