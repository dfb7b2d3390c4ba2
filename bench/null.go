package main

import "unsafe"

// The null allocators measure the harness: each hands out one fixed block and frees nothing,
// and runs through exactly the loops of the allocators it stands for, so that its ns per pair
// is what those loops cost around the allocator. The Go loops are generic and the compiler
// makes one body per shape of handle, so there is a Go null per shape that pinmalloc uses:
// null-go with a uintptr (the heap's; a pointer handle, go-syncpool's, is as cheap to carry)
// and null-go-bytes with a []byte (the pool's, make's). null-c runs the C loops of mimalloc
// and glibc (nullc.go). The harness-adjusted figures take each allocator's null off
// (adjust.go): on the build machine the Go loops cost 4–6 ns per pair and the C ones 2.5–3,
// a difference that would count against pinmalloc in every comparison with a C allocator.

// nullBlock is the block a null allocator hands out, a cache line of its own (two, for the
// adjacent-line prefetcher), so that goroutines touching their own nulls share nothing.
type nullBlock [128]byte

// nullAddr is the null allocator with uintptr handles.
type nullAddr struct {
	block *nullBlock // keeps the block alive: p alone would not
	p     uintptr
}

func newNullAddr() *nullAddr {
	b := new(nullBlock)
	return &nullAddr{b, uintptr(unsafe.Pointer(b))}
}

func (a *nullAddr) alloc(int) (uintptr, error) { return a.p, nil }
func (*nullAddr) free(uintptr) error           { return nil }
func (*nullAddr) touch(p uintptr)              { *bytePtr(p) = 1 }
func (*nullAddr) close() error                 { return nil }

// fork gives another goroutine a null with its own block, as the heap gives it its own heap.
func (*nullAddr) fork() (allocator[uintptr], error) { return newNullAddr(), nil }

// nullBytes is the null allocator with []byte handles.
type nullBytes struct{ b []byte }

func newNullBytes() *nullBytes { return &nullBytes{new(nullBlock)[:]} }

func (a *nullBytes) alloc(int) ([]byte, error) { return a.b, nil }
func (*nullBytes) free([]byte) error           { return nil }
func (*nullBytes) touch(b []byte)              { b[0] = 1 }
func (*nullBytes) close() error                { return nil }

// fork gives another goroutine a null with its own block: the pool that null-go-bytes stands
// for is shared by the goroutines, but sharing the null's one block would make them fight
// over its cache line, which the pool's blocks do not.
func (*nullBytes) fork() (allocator[[]byte], error) { return newNullBytes(), nil }

// nullImpls returns the null allocators. They take part in the cases measured in rounds
// (pair, mixed, prodcons, churn) whenever an allocator they stand for does.
func nullImpls() []impl {
	var out []impl
	for _, im := range []impl{
		goImpl("null-go", func(int64) (allocator[uintptr], error) { return newNullAddr(), nil }),
		goImpl("null-go-bytes", func(int64) (allocator[[]byte], error) { return newNullBytes(), nil }),
	} {
		im.trace, im.huge, im.replay = nil, nil, nil // they hold nothing
		out = append(out, im)
	}
	return append(out, newNullC())
}

// harnessOf names the Go null allocator whose loops are those of an allocator with handles
// of type H.
func harnessOf[H any]() string {
	if _, ok := any((*H)(nil)).(*[]byte); ok {
		return "null-go-bytes"
	}
	return "null-go"
}
