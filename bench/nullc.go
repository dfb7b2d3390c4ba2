//go:build cgo

package main

/*
#cgo CFLAGS: -O2
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
// The null allocator of the C loops: malloc hands out one block per thread (its own cache
// lines) and free does nothing. The loops call both through function pointers that the
// compiler cannot see through, as they call mimalloc and glibc through the PLT of a shared
// library: the calls are made, not inlined away.
static __thread char nullc_block[128] __attribute__((aligned(64)));
static void *nullc_malloc_impl(size_t n) { (void)n; return nullc_block; }
static void nullc_free_impl(void *p) { (void)p; }
static void *(*volatile nullc_malloc)(size_t) = nullc_malloc_impl;
static void (*volatile nullc_free)(void *) = nullc_free_impl;
#define BENCH_PREFIX nullc
#define BENCH_MALLOC(n) nullc_malloc(n)
#define BENCH_FREE(p) nullc_free(p)
#define BENCH_HELD() 0
#define BENCH_COLLECT() ((void)0)
#include "cloops.h"
*/
import "C"

// newNullC returns the null allocator of the C loops (null.go says what it is for).
func newNullC() impl {
	im := cImpl("null-c", cLoops{
		pair: func(size, n int) int64 { return int64(C.nullc_pair(C.size_t(size), C.int64_t(n))) },
		mixed: func(ops []uint32, n int, b *barrier) (int64, int64) {
			var start C.int64_t
			ns := C.nullc_mixed(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n), cArrived(b), C.int64_t(b.parties), &start)
			return int64(start), int64(ns)
		},
		prodcons: func(ops []uint32, n int) int64 {
			return int64(C.nullc_prodcons(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n)))
		},
		churn: func(live, size int) (func(n int) int64, func(), bool) {
			slots := C.nullc_churn_open(C.int64_t(live), C.size_t(size))
			return func(n int) int64 { return int64(C.nullc_churn(slots, C.int64_t(live), C.size_t(size), C.int64_t(n))) },
				func() { C.nullc_churn_close(slots, C.int64_t(live)) }, slots != nil
		},
	})
	im.replay = nil // it holds nothing
	return im
}

// cChurnSlot is cloops.h's bench_churn_slot, for the test that it draws what churnSlot draws.
func cChurnSlot(i, live uint64) uint64 {
	return uint64(C.bench_churn_slot(C.uint64_t(i), C.uint64_t(live)))
}

// cLarsonDraw is cloops.h's bench_larson_draw, for the test that it draws what larsonDraw draws.
func cLarsonDraw(t, i uint64) uint64 {
	return uint64(C.bench_larson_draw(C.uint64_t(t), C.uint64_t(i)))
}
