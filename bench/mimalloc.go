//go:build cgo

package main

/*
#cgo CFLAGS: -O2
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
// mimalloc, loaded at run time (libmimalloc.so.2, Debian's libmimalloc2.0) with RTLD_LOCAL:
// its mi_ functions are called through pointers, and its malloc does not take over the
// process's (the glibc loops keep libc's own). No build tag and no -dev package are needed.
typedef int mi_arena_id_t;
static void *(*mi_malloc_fn)(size_t);
static void (*mi_free_fn)(void *);
static int (*mi_version_fn)(void);
static void (*mi_process_info_fn)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *);
static bool (*mi_manage_os_memory_ex_fn)(void *, size_t, bool, bool, bool, int, bool, mi_arena_id_t *);
static void *(*mi_heap_new_in_arena_fn)(mi_arena_id_t);
static void *(*mi_heap_malloc_fn)(void *, size_t);
static void (*mi_heap_delete_fn)(void *);
static void (*mi_collect_fn)(bool);
static const char *mi_path;

// mi_load opens the library and resolves the functions; it returns NULL or what went wrong.
static const char *mi_load(void) {
	static const char *names[] = {"libmimalloc.so.2", "libmimalloc.so"};
	void *h = NULL;
	for (int i = 0; i < 2 && h == NULL; i++) {
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
		if (h != NULL) mi_path = names[i];
	}
	if (h == NULL) return "libmimalloc.so.2 not found";
	mi_malloc_fn = (void *(*)(size_t))dlsym(h, "mi_malloc");
	mi_free_fn = (void (*)(void *))dlsym(h, "mi_free");
	mi_version_fn = (int (*)(void))dlsym(h, "mi_version");
	mi_process_info_fn = (void (*)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *))dlsym(h, "mi_process_info");
	if (mi_malloc_fn == NULL || mi_free_fn == NULL || mi_version_fn == NULL || mi_process_info_fn == NULL)
		return "mi_malloc, mi_free, mi_version or mi_process_info missing from libmimalloc";
	// The exclusive arenas of the huge cases (mimalloc 2.0.9 and later); optional.
	mi_manage_os_memory_ex_fn = (bool (*)(void *, size_t, bool, bool, bool, int, bool, mi_arena_id_t *))dlsym(h, "mi_manage_os_memory_ex");
	mi_heap_new_in_arena_fn = (void *(*)(mi_arena_id_t))dlsym(h, "mi_heap_new_in_arena");
	mi_heap_malloc_fn = (void *(*)(void *, size_t))dlsym(h, "mi_heap_malloc");
	mi_heap_delete_fn = (void (*)(void *))dlsym(h, "mi_heap_delete");
	mi_collect_fn = (void (*)(bool))dlsym(h, "mi_collect"); // the footprint cases' trim; optional
	return NULL;
}
static int mi_version_of(void) { return mi_version_fn(); }
static const char *mi_loaded_from(void) { return mi_path; }
static bool mi_has_arenas(void) {
	return mi_manage_os_memory_ex_fn != NULL && mi_heap_new_in_arena_fn != NULL && mi_heap_malloc_fn != NULL && mi_heap_delete_fn != NULL;
}
#define BENCH_PREFIX mi
#define BENCH_MALLOC(n) mi_malloc_fn(n)
#define BENCH_FREE(p) mi_free_fn(p)
// mi_held is the memory mimalloc has committed now (mi_process_info).
static int64_t mi_held(void) {
	size_t elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults;
	mi_process_info_fn(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
	return (int64_t)commit;
}
#define BENCH_HELD() mi_held()
// mi_collect(true) gives back what the calling thread's heap can (the footprint cases).
static void mi_collect_now(void) {
	if (mi_collect_fn != NULL) mi_collect_fn(true);
}
#define BENCH_COLLECT() mi_collect_now()
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
	if (!mi_manage_os_memory_ex_fn(base, cap, true, false, true, -1, true, &mi_huge_arena)) {
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
	void *h = mi_heap_new_in_arena_fn(mi_huge_arena);
	if (h == NULL) return -3;
	int64_t t0 = bench_now_ns();
	char *p = mi_heap_malloc_fn(h, size);
	if (p == NULL) {
		mi_heap_delete_fn(h);
		return -1;
	}
	p[0] = 1;
	int64_t el = bench_now_ns() - t0;
	int outside = p < mi_huge_base || p + size > mi_huge_base + mi_huge_size;
	mi_free_fn(p);
	mi_heap_delete_fn(h);
	return outside ? -2 : el;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// newMimalloc returns mimalloc, timed inside C, with an exclusive arena for the huge cases;
// skipped, saying so, where libmimalloc.so.2 cannot be loaded.
func newMimalloc() impl {
	if msg := C.mi_load(); msg != nil {
		return impl{name: "mimalloc", skip: "not found (" + C.GoString(msg) + "; apt-get install libmimalloc2.0)"}
	}
	im := cImpl("mimalloc", cLoops{
		pair: func(size, n int) int64 { return int64(C.mi_pair(C.size_t(size), C.int64_t(n))) },
		mixed: func(ops []uint32, n int, b *barrier) (int64, int64) {
			var start C.int64_t
			ns := C.mi_mixed(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n), cArrived(b), C.int64_t(b.parties), &start)
			return int64(start), int64(ns)
		},
		prodcons: func(ops []uint32, n int) int64 {
			cpus, size := unboundCPUs()
			return int64(C.mi_prodcons(cOps(ops), C.int64_t(len(ops)-1), C.int64_t(n), cpus, C.int64_t(size)))
		},
		churn: func(live, size int) (func(n int) int64, func(), bool) {
			slots := C.mi_churn_open(C.int64_t(live), C.size_t(size))
			return func(n int) int64 { return int64(C.mi_churn(slots, C.int64_t(live), C.size_t(size), C.int64_t(n))) },
				func() { C.mi_churn_close(slots, C.int64_t(live)) }, slots != nil
		},
		larson: func(threads, slots, lo, hi, steps, idleMs int) (int64, [3]int64, int64, int64) {
			var held [3]C.int64_t
			var live, base C.int64_t
			ns := C.mi_larson(C.int64_t(threads), C.int64_t(slots), C.uint64_t(lo), C.uint64_t(hi), C.int64_t(steps), C.int64_t(idleMs), &held[0], &live, &base)
			return int64(ns), [3]int64{int64(held[0]), int64(held[1]), int64(held[2])}, int64(live), int64(base)
		},
		replay: func(ev []uint64, nalloc int) (int64, uint64, uint64) {
			// The slots hold C pointers only; Go's memory, not the allocator's (whose figure
			// would count them, libc's malloc for glibc).
			slots := make([]uintptr, max(nalloc, 1))
			var peak, base C.int64_t
			ns := C.mi_replay_fresh((*C.uint64_t)(unsafe.Pointer(&ev[0])), C.int64_t(len(ev)),
				(*unsafe.Pointer)(unsafe.Pointer(&slots[0])), &peak, &base)
			return int64(ns), uint64(peak), uint64(base)
		},
	})
	im.found = fmt.Sprintf("mimalloc %s (%s)", mimallocVersion(), C.GoString(C.mi_loaded_from()))
	if C.mi_has_arenas() {
		im.huge = mimallocHuge
	}
	return im
}

// mimallocVersion writes mi_version (209 is 2.0.9) as a version.
func mimallocVersion() string {
	v := int(C.mi_version_of())
	return fmt.Sprintf("%d.%d.%d", v/100, v/10%10, v%10)
}

// mimallocHuge makes one allocation in mimalloc's exclusive arena of the given capacity
// (mi_manage_os_memory_ex + mi_heap_new_in_arena).
func mimallocHuge(capacity, size int64) hugeResult {
	version := fmt.Sprintf("mimalloc %s exclusive arena of %s", mimallocVersion(), sizeName(capacity))
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
