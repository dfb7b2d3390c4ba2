//go:build cgo

package main

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE // dladdr
#include <dlfcn.h>
#include <malloc.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <gnu/libc-version.h>
// glibc's own malloc and free, found in libc.so.6 itself. A libmimalloc.so linked or preloaded
// before libc exports malloc, free, __libc_malloc and __libc_free too, so any of these names,
// called plainly, would reach mimalloc (an earlier build that linked it measured mimalloc as
// "glibc"). dlsym on libc's own handle searches libc (and its dependencies), never
// libmimalloc. The loops call through the pointers, as they call the others through the PLT.
static void *(*glibc_malloc_fn)(size_t);
static void (*glibc_free_fn)(void *);
static int (*glibc_trim_fn)(size_t);
static const char *glibc_resolve(void) {
	void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	if (h == NULL) return "dlopen libc.so.6 failed";
	glibc_malloc_fn = (void *(*)(size_t))dlsym(h, "malloc");
	glibc_free_fn = (void (*)(void *))dlsym(h, "free");
	glibc_trim_fn = (int (*)(size_t))dlsym(h, "malloc_trim"); // the footprint cases' trim; optional
	if (glibc_malloc_fn == NULL || glibc_free_fn == NULL) return "malloc or free not found in libc.so.6";
	return NULL;
}
// glibc_origin names the file that defines the malloc the loops call (tests check it is libc).
static const char *glibc_origin(void) {
	Dl_info info;
	if (glibc_malloc_fn == NULL || !dladdr((void *)glibc_malloc_fn, &info) || info.dli_fname == NULL) return "";
	return info.dli_fname;
}
#define BENCH_PREFIX glibc
#define BENCH_MALLOC(n) glibc_malloc_fn(n)
#define BENCH_FREE(p) glibc_free_fn(p)
// glibc_held is the memory glibc's arenas and mmapped chunks hold (mallinfo2, also found in
// libc.so.6: mimalloc does not export it, but this keeps it to the same library).
static int64_t glibc_held(void) {
	struct mallinfo2 m = mallinfo2();
	return (int64_t)(m.arena + m.hblkhd);
}
#define BENCH_HELD() glibc_held()
// malloc_trim(0) gives back what glibc can of the calling thread's arena (the footprint cases).
static void glibc_trim(void) {
	if (glibc_trim_fn != NULL) glibc_trim_fn(0);
}
#define BENCH_COLLECT() glibc_trim()
#include "cloops.h"
*/
import "C"

import "unsafe"

// cgoEnabled reports whether the C competitors are compiled in.
const cgoEnabled = true

// newGlibc returns glibc malloc (ptmalloc2), timed inside C; skipped where libc.so.6's own
// malloc cannot be found (another C library).
func newGlibc() impl {
	if msg := C.glibc_resolve(); msg != nil {
		return impl{name: "glibc", skip: "skipped (" + C.GoString(msg) + ")"}
	}
	im := cImpl("glibc", cLoops{
		pair: func(size, n int) int64 { return int64(C.glibc_pair(C.size_t(size), C.int64_t(n))) },
		mixed: func(ops []uint32, n int, b *barrier) (int64, int64) {
			var start C.int64_t
			ns := C.glibc_mixed(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n), cArrived(b), C.int64_t(b.parties), &start)
			return int64(start), int64(ns)
		},
		prodcons: func(ops []uint32, n int) int64 {
			cpus, size := unboundCPUs()
			return int64(C.glibc_prodcons(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n), cpus, C.int64_t(size)))
		},
		churn: func(live, size int) (func(n int) int64, func(), bool) {
			slots := C.glibc_churn_open(C.int64_t(live), C.size_t(size))
			return func(n int) int64 { return int64(C.glibc_churn(slots, C.int64_t(live), C.size_t(size), C.int64_t(n))) },
				func() { C.glibc_churn_close(slots, C.int64_t(live)) }, slots != nil
		},
		larson: func(threads, slots, lo, hi, steps, idleMs int) (int64, [3]int64, int64, int64) {
			var held [3]C.int64_t
			var live, base C.int64_t
			ns := C.glibc_larson(C.int64_t(threads), C.int64_t(slots), C.uint64_t(lo), C.uint64_t(hi), C.int64_t(steps), C.int64_t(idleMs), &held[0], &live, &base)
			return int64(ns), [3]int64{int64(held[0]), int64(held[1]), int64(held[2])}, int64(live), int64(base)
		},
		replay: func(ev []uint64, nalloc int) (int64, uint64, uint64) {
			// The slots hold C pointers only; Go's memory, not the allocator's (whose figure
			// would count them, libc's malloc for glibc).
			slots := make([]uintptr, max(nalloc, 1))
			var peak, base C.int64_t
			ns := C.glibc_replay_fresh((*C.uint64_t)(unsafe.Pointer(&ev[0])), C.int64_t(len(ev)),
				(*unsafe.Pointer)(unsafe.Pointer(&slots[0])), &peak, &base)
			return int64(ns), uint64(peak), uint64(base)
		},
	})
	im.found = "glibc " + C.GoString(C.gnu_get_libc_version()) + " (libc.so.6)"
	return im
}

// glibcOrigin names the shared object whose malloc the glibc loops call.
func glibcOrigin() string { return C.GoString(C.glibc_origin()) }

// cArrived passes the barrier's counter to C, which waits on it during the call.
func cArrived(b *barrier) *C.int64_t { return (*C.int64_t)(unsafe.Pointer(&b.arrived)) }

// cOps passes the op sequence to C. The C loops read it only during the call.
func cOps(ops []uint32) *C.uint32_t { return (*C.uint32_t)(unsafe.Pointer(&ops[0])) }
