//go:build cgo

package main

/*
#cgo CFLAGS: -O2
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
// glibc's own entry points: with -tags mimalloc, libmimalloc.so (which exports malloc and
// free) may interpose the plain names for the whole process, so the glibc loops name glibc.
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
#define BENCH_PREFIX glibc
#define BENCH_MALLOC(n) __libc_malloc(n)
#define BENCH_FREE(p) __libc_free(p)
// glibc_held is the memory glibc's arenas and mmapped chunks hold (mallinfo2).
static int64_t glibc_held(void) {
	struct mallinfo2 m = mallinfo2();
	return (int64_t)(m.arena + m.hblkhd);
}
#define BENCH_HELD() glibc_held()
#include "cloops.h"
*/
import "C"

import "unsafe"

// cgoEnabled reports whether the C competitors are compiled in.
const cgoEnabled = true

// newGlibc returns glibc malloc (ptmalloc2), timed inside C.
func newGlibc() impl {
	return cImpl("glibc", cLoops{
		pair: func(size, n int) int64 { return int64(C.glibc_pair(C.size_t(size), C.int64_t(n))) },
		mixed: func(ops []uint32, n int, b *barrier) (int64, int64) {
			var start C.int64_t
			ns := C.glibc_mixed(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n), cArrived(b), C.int64_t(b.parties), &start)
			return int64(start), int64(ns)
		},
		prodcons: func(ops []uint32, n int) int64 {
			return int64(C.glibc_prodcons(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n)))
		},
		churn: func(live, size int) (func(n int) int64, func(), bool) {
			slots := C.glibc_churn_open(C.int64_t(live), C.size_t(size))
			return func(n int) int64 { return int64(C.glibc_churn(slots, C.int64_t(live), C.size_t(size), C.int64_t(n))) },
				func() { C.glibc_churn_close(slots, C.int64_t(live)) }, slots != nil
		},
		replay: func(ev []uint64, nalloc int) (int64, uint64) {
			slots := C.malloc(C.size_t(max(nalloc, 1)) * C.size_t(unsafe.Sizeof(uintptr(0))))
			defer C.free(slots)
			var peak C.int64_t
			ns := C.glibc_replay((*C.uint64_t)(unsafe.Pointer(&ev[0])), C.int64_t(len(ev)), (*unsafe.Pointer)(slots), &peak)
			return int64(ns), uint64(peak)
		},
	})
}

// cArrived passes the barrier's counter to C, which waits on it during the call.
func cArrived(b *barrier) *C.int64_t { return (*C.int64_t)(unsafe.Pointer(&b.arrived)) }

// cOps passes the op sequence to C. The C loops read it only during the call.
func cOps(ops []uint32) *C.uint32_t { return (*C.uint32_t)(unsafe.Pointer(&ops[0])) }
