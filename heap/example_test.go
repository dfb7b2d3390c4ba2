package heap_test

import (
	"fmt"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
)

// A heap works in addresses, not slices, so the same code serves memory the CPU cannot touch.
// Here it carves locked host memory; frees from other goroutines go through the group.
func Example() {
	a, err := arena.New(arena.Options{Provider: arena.LockedHost(arena.HostOptions{}), Capacity: 64 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	h, err := heap.New(a, heap.Options{Align: 256})
	if err != nil {
		fmt.Println(err)
		return
	}
	p, _ := h.Alloc(1000)
	q, _ := h.Alloc(4 << 20) // a huge object: no cap below the arena's capacity
	fmt.Println(p%256 == 0, q%256 == 0)
	fmt.Println(h.Free(p), h.Group().Free(q)) // the second is the lock-free path
	fmt.Println(h.Close())
	// Output:
	// true true
	// <nil> <nil>
	// <nil>
}
