//go:build mimalloc && cgo

package main

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -lmimalloc
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <mimalloc.h>
#define BENCH_PREFIX mi
#define BENCH_MALLOC(n) mi_malloc(n)
#define BENCH_FREE(p) mi_free(p)
// mi_held is the memory mimalloc has committed now (mi_process_info).
static int64_t mi_held(void) {
	size_t elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults;
	mi_process_info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
	return (int64_t)commit;
}
#define BENCH_HELD() mi_held()
#include "cloops.h"

// The exclusive arena of the huge-object cases: made once per process, since mimalloc 2.0.9
// cannot destroy an arena.
static mi_arena_id_t mi_huge_arena;
static char *mi_huge_base;
static size_t mi_huge_size;

// mi_huge_open maps cap bytes aligned to 64 MiB (mimalloc's best case: no alignment loss)
// and gives them to mimalloc as an exclusive arena. It returns 0, an errno, or -1 when
// mimalloc refuses the region.
static int mi_huge_open(size_t cap) {
	if (mi_huge_base != NULL) return mi_huge_size == cap ? 0 : EINVAL;
	size_t align = (size_t)64 << 20;
	char *p = mmap(NULL, cap + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) return errno;
	char *base = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
	if (base > p) munmap(p, base - p);
	munmap(base + cap, p + cap + align - (base + cap));
	if (!mi_manage_os_memory_ex(base, cap, true, false, true, -1, true, &mi_huge_arena)) {
		munmap(base, cap);
		return -1;
	}
	mi_huge_base = base;
	mi_huge_size = cap;
	return 0;
}

// mi_huge_try allocates size bytes from a fresh heap in the exclusive arena, touches the
// first byte and frees the block, all on this thread (a mimalloc heap belongs to the thread
// that made it). It returns the elapsed ns, -1 when mimalloc returned NULL, -2 when the block
// came from outside the arena, -3 when the heap could not be made.
static int64_t mi_huge_try(size_t size) {
	mi_heap_t *h = mi_heap_new_in_arena(mi_huge_arena);
	if (h == NULL) return -3;
	int64_t t0 = bench_now_ns();
	char *p = mi_heap_malloc(h, size);
	if (p == NULL) {
		mi_heap_delete(h);
		return -1;
	}
	p[0] = 1;
	int64_t el = bench_now_ns() - t0;
	int outside = p < mi_huge_base || p + size > mi_huge_base + mi_huge_size;
	mi_free(p);
	mi_heap_delete(h);
	return outside ? -2 : el;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// newMimalloc returns mimalloc, timed inside C, with an exclusive arena for the huge cases.
func newMimalloc() impl {
	im := cImpl("mimalloc", cLoops{
		pair: func(size, n int) int64 { return int64(C.mi_pair(C.size_t(size), C.int64_t(n))) },
		mixed: func(ops []uint32, n int, b *barrier) (int64, int64) {
			var start C.int64_t
			ns := C.mi_mixed(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n), cArrived(b), C.int64_t(b.parties), &start)
			return int64(start), int64(ns)
		},
		prodcons: func(ops []uint32, n int) int64 {
			return int64(C.mi_prodcons(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n)))
		},
		churn: func(live, size int) (func(n int) int64, func(), bool) {
			slots := C.mi_churn_open(C.int64_t(live), C.size_t(size))
			return func(n int) int64 { return int64(C.mi_churn(slots, C.int64_t(live), C.size_t(size), C.int64_t(n))) },
				func() { C.mi_churn_close(slots, C.int64_t(live)) }, slots != nil
		},
		replay: func(ev []uint64, nalloc int) (int64, uint64) {
			slots := C.malloc(C.size_t(max(nalloc, 1)) * C.size_t(unsafe.Sizeof(uintptr(0))))
			defer C.free(slots)
			var peak C.int64_t
			ns := C.mi_replay((*C.uint64_t)(unsafe.Pointer(&ev[0])), C.int64_t(len(ev)), (*unsafe.Pointer)(slots), &peak)
			return int64(ns), uint64(peak)
		},
	})
	im.huge = mimallocHuge
	return im
}

// mimallocHuge makes one allocation in mimalloc's exclusive arena of the given capacity
// (mi_manage_os_memory_ex + mi_heap_new_in_arena).
func mimallocHuge(capacity, size int64) hugeResult {
	version := fmt.Sprintf("mimalloc %d exclusive arena of %s", int(C.mi_version()), sizeName(capacity))
	if rc := C.mi_huge_open(C.size_t(capacity)); rc != 0 {
		return hugeResult{err: fmt.Errorf("%s: mi_manage_os_memory_ex refused the region (%d)", version, int(rc))}
	}
	ns := int64(C.mi_huge_try(C.size_t(size)))
	switch ns {
	case -1:
		return hugeResult{err: errors.New(version + ": mi_heap_malloc returned NULL")}
	case -2:
		return hugeResult{err: errors.New(version + ": block came from outside the arena")}
	case -3:
		return hugeResult{err: errors.New(version + ": mi_heap_new_in_arena failed")}
	}
	return hugeResult{ok: true, ns: float64(ns), note: version}
}
