package pinned_test

import (
	"errors"
	"fmt"

	"github.com/pinmalloc/pinmalloc/pinned"
)

// A pool hands out page-locked buffers; freeing gives them back for reuse.
func Example() {
	pool, err := pinned.New(pinned.Options{Capacity: 64 << 20})
	if err != nil {
		fmt.Println("no pinned memory:", err) // e.g. RLIMIT_MEMLOCK too low: the error says how to raise it
		return
	}
	defer pool.Close()

	buf, err := pool.Alloc(1 << 20) // 1 MiB, locked, 64-byte aligned, len == cap
	if err != nil {
		fmt.Println(err)
		return
	}
	copy(buf, "staging data for a DMA transfer")
	fmt.Println(len(buf), cap(buf), string(buf[:12]))
	if err := pool.Free(buf); err != nil {
		fmt.Println(err)
	}
	st := pool.Stats()
	fmt.Println(st.Backend, st.Live)
	// Output:
	// 1048576 1048576 staging data
	// locked 0
}

// Mistakes are reported, never acted on: the pool stays usable.
func ExamplePool_Free() {
	pool, err := pinned.New(pinned.Options{Capacity: 16 << 20, Backend: pinned.Pageable})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	buf, _ := pool.Alloc(4096)
	fmt.Println(errors.Is(pool.Free(buf[16:]), pinned.ErrSubSlice))
	fmt.Println(errors.Is(pool.Free(make([]byte, 8)), pinned.ErrNotOwned))
	fmt.Println(pool.Free(buf))
	fmt.Println(errors.Is(pool.Free(buf), pinned.ErrDoubleFree))
	// Output:
	// true
	// true
	// <nil>
	// true
}

// AllocAligned serves any power-of-two alignment, beyond the 2 MiB chunk size too.
func ExamplePool_AllocAligned() {
	pool, err := pinned.New(pinned.Options{Capacity: 64 << 20, Align: 256})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	for _, al := range []int{4096, 1 << 20, 8 << 20} {
		buf, err := pool.AllocAligned(10000, al)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(al, len(buf), pool.Free(buf))
	}
	// Output:
	// 4096 10000 <nil>
	// 1048576 10000 <nil>
	// 8388608 10000 <nil>
}

// A buffer held for work outside the pool (a network transfer in flight) may be freed at any
// time: the free takes effect when the work releases it.
func ExamplePool_Hold() {
	pool, err := pinned.New(pinned.Options{Capacity: 16 << 20, Backend: pinned.Pageable})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	buf, _ := pool.Alloc(64 << 10)
	h, _ := pool.Hold(buf) // a transfer starts: it reads buf until it ends

	fmt.Println(pool.Free(buf), pool.Usage().Live) // the caller is done with buf: deferred
	fmt.Println(h.Release(), pool.Usage().Live)    // the transfer ends: buf goes back now
	// Output:
	// <nil> 1
	// <nil> 0
}

// PoolOf finds the pool of a buffer that code queuing asynchronous work on it must tell (as
// device.Heap's async copies do, with RecordStream): only pools whose memory the driver
// copies after the call returns (CUDAHost) order their reuse after streams. A locked pool's
// buffers, and Go memory, have none: the driver copies them before the call returns.
func ExamplePoolOf() {
	pool, err := pinned.New(pinned.Options{Capacity: 16 << 20, Backend: pinned.Pageable})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	buf, _ := pool.Alloc(4096)
	fmt.Println(pinned.PoolOf(buf) == nil, pool.Device())
	fmt.Println(pinned.PoolOf(make([]byte, 64)) == nil)
	_ = pool.Free(buf)
	// Output:
	// true -1
	// true
}
