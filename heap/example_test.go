package heap_test

import (
	"fmt"
	"sync"

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

// soleLender lends one heap under a mutex: what a front with a lock per heap does.
type soleLender struct {
	mu sync.Mutex
	h  *heap.Heap
}

func (l *soleLender) TryLend() *heap.Heap {
	if l.mu.TryLock() {
		return l.h
	}
	return nil
}

func (l *soleLender) EndLend() { l.mu.Unlock() }

// Where memory commits 2 MiB at a time (huge pages here; CUDA's VMM host memory), each heap's
// small blocks would hold a chunk of their own. A heap that borrows room from another keeps
// its blocks in the lender's chunk.
func ExampleHeap_SetLender() {
	a, err := arena.New(arena.Options{Provider: arena.PageableHost(arena.HostOptions{HugePages: arena.HugeTLB}), Capacity: 1 << 30})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	g, _ := heap.NewGroup(a)
	lender, _ := g.NewHeap(heap.Options{})
	borrower, _ := g.NewHeap(heap.Options{})
	borrower.SetLender(&soleLender{h: lender})
	big, _ := lender.Alloc(1 << 20)
	small, _ := borrower.Alloc(4 << 10)
	fmt.Println("committed MiB:", a.Usage().Committed>>20)
	fmt.Println(borrower.Free(small), lender.Free(big))
	fmt.Println(borrower.Close(), lender.Close()) // the lender last
	// Output:
	// committed MiB: 2
	// <nil> <nil>
	// <nil> <nil>
}
