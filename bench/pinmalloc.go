package main

import (
	"errors"
	"unsafe"

	"github.com/pinmalloc/pinmalloc/arena"
	"github.com/pinmalloc/pinmalloc/heap"
)

// This file and pinned.go are the only ones that call pinmalloc. Both fronts run over locked
// (mmap+mlock) host memory, the library's default without a GPU, or over pageable memory where
// the memlock limit is too low for the suite (memlock.go).

// heapAlign is the mandated alignment of the pinmalloc heap (a cache line).
const heapAlign = 64

// pinHeap is a single-owner heap.Heap over a locked arena. fork adds another heap to the
// arena's heap.Group for another goroutine; frees from a goroutine other than the owner go
// through the group, the lock-free remote path.
type pinHeap struct {
	ar    *arena.Arena
	g     *heap.Group
	h     *heap.Heap
	owner bool // closes the arena
}

func newPinmallocHeap() impl {
	return goImpl("pinmalloc-heap", func(capacity int64) (allocator[uintptr], error) {
		prov := arena.LockedHost(arena.HostOptions{})
		if hostMemory.pageable {
			prov = arena.PageableHost(arena.HostOptions{})
		}
		ar, err := arena.New(arena.Options{Provider: prov, Capacity: uintptr(capacity)})
		if err != nil {
			return nil, err
		}
		g, err := heap.NewGroup(ar)
		if err != nil {
			return nil, errors.Join(err, ar.Close())
		}
		h, err := g.NewHeap(heap.Options{Align: heapAlign})
		if err != nil {
			return nil, errors.Join(err, ar.Close())
		}
		return &pinHeap{ar: ar, g: g, h: h, owner: true}, nil
	})
}

func (a *pinHeap) alloc(n int) (uintptr, error) { return a.h.Alloc(uintptr(n)) }
func (a *pinHeap) free(p uintptr) error         { return a.h.Free(p) }
func (*pinHeap) touch(p uintptr)                { *bytePtr(p) = 1 }
func (a *pinHeap) footprint() (held, resident uint64) {
	c := a.ar.Stats().Committed
	return c, c
}

func (a *pinHeap) fork() (allocator[uintptr], error) {
	h, err := a.g.NewHeap(heap.Options{Align: heapAlign})
	if err != nil {
		return nil, err
	}
	return &pinHeap{ar: a.ar, g: a.g, h: h}, nil
}

func (a *pinHeap) close() error {
	err := a.h.Close()
	if a.owner {
		err = errors.Join(err, a.ar.Close())
	}
	return err
}

// bytePtr turns a block address from the heap into a pointer. The memory is the arena's,
// outside the Go heap, so the garbage collector neither moves nor frees it.
func bytePtr(p uintptr) *byte { return *(**byte)(unsafe.Pointer(&p)) }
