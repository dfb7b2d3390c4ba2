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

// nullc_consumer_cpus is how many CPUs the thread that last freed a block may run on (the
// consumer of nullc_prodcons, when nullc_free is nullc_free_counting).
static _Atomic int nullc_consumer_cpus;
static void nullc_free_counting(void *p) {
	(void)p;
	uint64_t set[16] = {0};
	long n = syscall(SYS_sched_getaffinity, 0, sizeof set, set);
	int c = 0;
	for (long i = 0; i < n / 8; i++) c += __builtin_popcountll(set[i]);
	atomic_store(&nullc_consumer_cpus, c);
}

// nullc_prodcons_consumer_cpus runs nullc_prodcons over ops and returns how many CPUs its
// consumer thread may run on.
static int nullc_prodcons_consumer_cpus(const uint32_t *ops, int64_t mask, const void *cpus, int64_t cpu_bytes) {
	nullc_free = nullc_free_counting;
	int64_t ns = nullc_prodcons(ops, mask, BENCH_BATCH, cpus, cpu_bytes);
	nullc_free = nullc_free_impl;
	return ns < 0 ? -1 : atomic_load(&nullc_consumer_cpus);
}
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
			cpus, size := unboundCPUs()
			return int64(C.nullc_prodcons(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n), cpus, C.int64_t(size)))
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

// cProdconsConsumerCPUs runs the C loops' producer/consumer case on the null allocator and
// returns how many CPUs its consumer thread may run on, for the test that a caller bound to one
// CPU (interleave) does not bind the consumer with it.
func cProdconsConsumerCPUs(ops []uint32) int {
	cpus, size := unboundCPUs()
	return int(C.nullc_prodcons_consumer_cpus(cOps(ops), C.int64_t(len(ops)-1), cpus, C.int64_t(size)))
}
