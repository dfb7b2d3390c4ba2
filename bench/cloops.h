// cloops.h holds the timed loops that the C allocators (glibc, mimalloc) run. The whole loop runs
// inside one cgo call and times itself with clock_gettime, so the cgo crossing is not charged to
// the allocator. The loops mirror the Go ones in goloops.go operation for operation: same size
// sequence, same slot table, same batch shape.
//
// The file is a template: define BENCH_PREFIX, BENCH_MALLOC(n), BENCH_FREE(p), BENCH_HELD() (the
// bytes the allocator holds from the OS) and BENCH_COLLECT() (what gives free memory back on the
// calling thread), then include it.
// It defines static functions <prefix>_pair, <prefix>_mixed, <prefix>_prodcons, <prefix>_churn,
// <prefix>_replay, <prefix>_replay_fresh and <prefix>_larson, each returning the elapsed
// nanoseconds, or -1 when an allocation failed, and <prefix>_churn_open and
// <prefix>_churn_close, which set up and free the churn's live blocks.

#ifndef BENCH_CLOOPS_COMMON
#define BENCH_CLOOPS_COMMON

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// Keep these three in step with goloops.go (slotBits, batchLen, ringLen).
#define BENCH_SLOT_BITS 10
#define BENCH_BATCH 64
#define BENCH_RING 16

static inline int64_t bench_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// An op packs a slot index (low BENCH_SLOT_BITS bits) and a size (the rest).
static inline size_t bench_op_slot(uint32_t op) { return op & ((1u << BENCH_SLOT_BITS) - 1); }
static inline size_t bench_op_size(uint32_t op) { return op >> BENCH_SLOT_BITS; }

// Keep these two in step with churn.go (churnSeed, churnSlot).
#define BENCH_CHURN_SEED 0x636875726e5f6f70ull

// bench_churn_slot draws the slot, below live, of the i-th operation of a churn run: the i-th
// output of splitmix64, scaled.
static inline uint64_t bench_churn_slot(uint64_t i, uint64_t live) {
	uint64_t z = BENCH_CHURN_SEED + i * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (z >> 32) * live >> 32;
}

// bench_barrier is the C side of barrier.wait in harness.go.
static void bench_barrier(int64_t *arrived, int64_t parties) {
	_Atomic int64_t *a = (_Atomic int64_t *)arrived;
	atomic_fetch_add(a, 1);
	while (atomic_load(a) < parties) sched_yield();
}

// bench_ring is a single-producer single-consumer ring of batches of pointers.
typedef struct {
	void *batch[BENCH_RING][BENCH_BATCH];
	_Atomic int64_t head; // batches published by the producer
	_Atomic int64_t tail; // batches released by the consumer
	int64_t nbatches;
	void (*release)(void *);
	const void *cpus; // the consumer's CPU mask (bench_unbind), or NULL
	int64_t cpu_bytes;
} bench_ring;

// bench_unbind sets the calling thread's CPU affinity to cpus, a mask of cpu_bytes bytes, when
// given. A thread inherits the affinity of the thread that created it: one started by a loop
// that interleave bound to one CPU (onecpu_linux.go) would run there too, beside its creator,
// where the Go loops' goroutines run where the scheduler puts them.
static void bench_unbind(const void *cpus, int64_t cpu_bytes) {
#ifdef SYS_sched_setaffinity
	if (cpus != NULL && cpu_bytes > 0) syscall(SYS_sched_setaffinity, 0, (size_t)cpu_bytes, cpus);
#endif
}

static void *bench_consumer(void *arg) {
	bench_ring *r = arg;
	bench_unbind(r->cpus, r->cpu_bytes);
	for (int64_t k = 0; k < r->nbatches; k++) {
		while (atomic_load_explicit(&r->head, memory_order_acquire) == k) sched_yield();
		void **b = r->batch[k % BENCH_RING];
		for (int i = 0; i < BENCH_BATCH; i++) r->release(b[i]);
		atomic_store_explicit(&r->tail, k + 1, memory_order_release);
	}
	return NULL;
}

// Keep this in step with footprint.go (larsonDraw).
#define BENCH_LARSON_SEED 0x6c6172736f6e3338ull

// bench_larson_draw is the i-th draw of thread t of a larson run: splitmix64 of the pair.
static inline uint64_t bench_larson_draw(uint64_t t, uint64_t i) {
	uint64_t z = BENCH_LARSON_SEED + (t << 40 ^ i) * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// bench_larson is a larson run's shape and its threads' meeting points.
typedef struct {
	int64_t threads, slots, steps;
	uint64_t lo, hi;
	pthread_barrier_t churned, collect, collected, release;
	_Atomic int64_t live;  // bytes asked for by the blocks live after the churn
	_Atomic int64_t fails; // allocations that failed
	void *(*malloc_fn)(size_t);
	void (*free_fn)(void *);
	void (*collect_fn)(void);
} bench_larson;

typedef struct {
	bench_larson *run;
	int64_t t;
} bench_larson_arg;

static inline size_t bench_larson_size(bench_larson *r, uint64_t z) {
	return (size_t)(r->lo + ((z & 0xffffffffull) * (r->hi - r->lo + 1) >> 32));
}

// bench_larson_thread fills its slots, churns, and keeps its blocks live, idle, until the
// main thread has sampled what the allocator holds; then it collects, waits, and frees.
static void *bench_larson_thread(void *p) {
	bench_larson_arg *a = p;
	bench_larson *r = a->run;
	// The slots and sizes are the loop's own, mapped apart from the allocator under test: glibc's
	// figure (mallinfo2) would count them if they came from libc's calloc.
	size_t bytes = (size_t)r->slots * (sizeof(void *) + sizeof(size_t));
	void *arrays = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (arrays == MAP_FAILED) arrays = NULL;
	void **slot = arrays;
	size_t *size = arrays == NULL ? NULL : (size_t *)(slot + r->slots);
	int64_t fails = arrays == NULL;
	for (int64_t i = 0; !fails && i < r->slots; i++) {
		size[i] = bench_larson_size(r, bench_larson_draw((uint64_t)a->t, (uint64_t)i));
		char *b = r->malloc_fn(size[i]);
		fails += b == NULL;
		if (b != NULL) b[0] = 1;
		slot[i] = b;
	}
	for (int64_t k = 0; !fails && k < r->steps; k++) {
		uint64_t z = bench_larson_draw((uint64_t)a->t, (uint64_t)(r->slots + k));
		uint64_t i = (z >> 32) * (uint64_t)r->slots >> 32;
		r->free_fn(slot[i]);
		size[i] = bench_larson_size(r, z);
		char *b = r->malloc_fn(size[i]);
		fails += b == NULL;
		if (b != NULL) b[0] = b[size[i] - 1] = (char)k;
		slot[i] = b;
	}
	int64_t live = 0;
	for (int64_t i = 0; slot != NULL && i < r->slots; i++) {
		if (slot[i] != NULL) live += (int64_t)size[i];
	}
	atomic_fetch_add(&r->live, live);
	atomic_fetch_add(&r->fails, fails);
	pthread_barrier_wait(&r->churned);
	pthread_barrier_wait(&r->collect);
	r->collect_fn();
	pthread_barrier_wait(&r->collected);
	pthread_barrier_wait(&r->release);
	for (int64_t i = 0; slot != NULL && i < r->slots; i++) {
		if (slot[i] != NULL) r->free_fn(slot[i]);
	}
	if (arrays != NULL) munmap(arrays, bytes);
	return NULL;
}

// bench_larson_run runs r on r->threads threads. held gets what the allocator holds at the end
// of the churn, after idle_ms with every thread idle and its blocks live, and after each thread
// collected (the collect function); *live the bytes live. It returns the churn's ns (from the
// start to the last thread done), or -1 when an allocation failed or a thread could not start.
static int64_t bench_larson_run(bench_larson *r, int64_t idle_ms, int64_t (*held_fn)(void), int64_t held[3], int64_t *live) {
	// The threads' table is mapped apart from the allocator, as their slots are: from libc's
	// calloc, glibc's figure would count it (and before the baseline took the calling thread's
	// arena, the 132 KiB arena its first malloc made).
	size_t tbytes = (size_t)r->threads * (sizeof(pthread_t) + sizeof(bench_larson_arg));
	void *table = mmap(NULL, tbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (table == MAP_FAILED) return -1;
	bench_larson_arg *args = table;
	pthread_t *th = (pthread_t *)(args + r->threads);
	unsigned parties = (unsigned)r->threads + 1;
	pthread_barrier_init(&r->churned, NULL, parties);
	pthread_barrier_init(&r->collect, NULL, parties);
	pthread_barrier_init(&r->collected, NULL, parties);
	pthread_barrier_init(&r->release, NULL, parties);
	int64_t t0 = bench_now_ns();
	for (int64_t t = 0; t < r->threads; t++) {
		args[t] = (bench_larson_arg){r, t};
		if (pthread_create(&th[t], NULL, bench_larson_thread, &args[t]) != 0) abort(); // the barriers count on it
	}
	pthread_barrier_wait(&r->churned);
	int64_t el = bench_now_ns() - t0;
	held[0] = held_fn();
	struct timespec ts = {idle_ms / 1000, (idle_ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
	held[1] = held_fn();
	pthread_barrier_wait(&r->collect);
	pthread_barrier_wait(&r->collected);
	held[2] = held_fn();
	pthread_barrier_wait(&r->release);
	for (int64_t t = 0; t < r->threads; t++) pthread_join(th[t], NULL);
	pthread_barrier_destroy(&r->churned);
	pthread_barrier_destroy(&r->collect);
	pthread_barrier_destroy(&r->collected);
	pthread_barrier_destroy(&r->release);
	munmap(table, tbytes);
	*live = atomic_load(&r->live);
	return atomic_load(&r->fails) ? -1 : el;
}

// bench_replay_call is a replay to run on a thread of its own (bench_replay_fresh): the
// loop, its arguments and its result.
typedef struct {
	int64_t (*fn)(const uint64_t *ev, int64_t n, void **slots, int64_t *peak);
	const uint64_t *ev;
	int64_t n;
	void **slots;
	int64_t *peak;
	int64_t ns;
} bench_replay_call;

static void *bench_replay_thread(void *p) {
	bench_replay_call *c = p;
	c->ns = c->fn(c->ev, c->n, c->slots, c->peak);
	return NULL;
}

// bench_replay_fresh runs c on a new thread and waits for it: it returns the replay's ns, or
// -2 when the thread could not start.
static int64_t bench_replay_fresh(bench_replay_call *c) {
	pthread_t th;
	if (pthread_create(&th, NULL, bench_replay_thread, c) != 0) return -2;
	pthread_join(th, NULL);
	return c->ns;
}

#endif // BENCH_CLOOPS_COMMON

#define BENCH_CAT2(a, b) a##_##b
#define BENCH_CAT(a, b) BENCH_CAT2(a, b)
#define BENCH_FN(name) BENCH_CAT(BENCH_PREFIX, name)

// <prefix>_pair allocates, touches and frees one block of size bytes n times.
static int64_t BENCH_FN(pair)(size_t size, int64_t n) {
	int64_t t0 = bench_now_ns();
	for (int64_t i = 0; i < n; i++) {
		volatile char *p = BENCH_MALLOC(size);
		if (p == NULL) return -1;
		p[0] = (char)i;
		BENCH_FREE((void *)p);
	}
	return bench_now_ns() - t0;
}

// <prefix>_mixed fills a table of 1<<BENCH_SLOT_BITS blocks, waits at the barrier (parties
// callers, counted in *arrived), then n times frees the block in the op's slot and allocates
// the op's size into it. ops has mask+1 entries (a power of two). *start gets the time the
// timed part began (bench_now_ns), so that a parallel run can measure from the first start.
static int64_t BENCH_FN(mixed)(const uint32_t *ops, int64_t mask, int64_t n, int64_t *arrived, int64_t parties, int64_t *start) {
	enum { nslots = 1 << BENCH_SLOT_BITS };
	void *slots[nslots];
	int failed = 0;
	for (int i = 0; i < nslots; i++) {
		slots[i] = BENCH_MALLOC(bench_op_size(ops[i & mask]));
		failed |= slots[i] == NULL;
	}
	bench_barrier(arrived, parties);
	int64_t t0 = bench_now_ns();
	*start = t0;
	for (int64_t i = 0; !failed && i < n; i++) {
		uint32_t op = ops[i & mask];
		size_t s = bench_op_slot(op);
		BENCH_FREE(slots[s]);
		char *p = BENCH_MALLOC(bench_op_size(op));
		failed |= p == NULL;
		if (p != NULL) p[0] = (char)i;
		slots[s] = p;
	}
	int64_t el = bench_now_ns() - t0;
	for (int i = 0; i < nslots; i++) BENCH_FREE(slots[i]);
	return failed ? -1 : el;
}

static void BENCH_FN(release)(void *p) { BENCH_FREE(p); }

// <prefix>_prodcons allocates n blocks (rounded up to whole batches) on the calling thread and
// frees them on a second thread, passing batches of BENCH_BATCH through a ring of BENCH_RING.
// The second thread runs on the CPUs of cpus (cpu_bytes bytes; NULL: the calling thread's).
static int64_t BENCH_FN(prodcons)(const uint32_t *ops, int64_t mask, int64_t n, const void *cpus, int64_t cpu_bytes) {
	bench_ring *r = calloc(1, sizeof *r);
	if (r == NULL) return -1;
	r->nbatches = (n + BENCH_BATCH - 1) / BENCH_BATCH;
	r->release = BENCH_FN(release);
	r->cpus = cpus;
	r->cpu_bytes = cpu_bytes;
	int failed = 0;
	pthread_t consumer;
	int64_t t0 = bench_now_ns();
	if (pthread_create(&consumer, NULL, bench_consumer, r) != 0) {
		free(r);
		return -1;
	}
	int64_t i = 0;
	for (int64_t k = 0; k < r->nbatches; k++) {
		while (k - atomic_load_explicit(&r->tail, memory_order_acquire) >= BENCH_RING) sched_yield();
		void **b = r->batch[k % BENCH_RING];
		for (int j = 0; j < BENCH_BATCH; j++, i++) {
			char *p = BENCH_MALLOC(bench_op_size(ops[i & mask]));
			failed |= p == NULL;
			if (p != NULL) p[0] = (char)i;
			b[j] = p;
		}
		atomic_store_explicit(&r->head, k + 1, memory_order_release);
	}
	pthread_join(consumer, NULL);
	int64_t el = bench_now_ns() - t0;
	free(r);
	return failed ? -1 : el;
}

// <prefix>_churn_open allocates a table of live blocks of size bytes, each touched. It returns the
// table, or NULL when an allocation failed (having freed what it allocated). The table itself
// comes from calloc, which may be the allocator under test: it is set up before the timing.
static void **BENCH_FN(churn_open)(int64_t live, size_t size) {
	void **slots = calloc((size_t)live, sizeof *slots);
	if (slots == NULL) return NULL;
	for (int64_t i = 0; i < live; i++) {
		char *p = BENCH_MALLOC(size);
		if (p == NULL) {
			for (int64_t j = 0; j < i; j++) BENCH_FREE(slots[j]);
			free(slots);
			return NULL;
		}
		p[0] = 1;
		slots[i] = p;
	}
	return slots;
}

// <prefix>_churn n times frees the block in a slot drawn by bench_churn_slot and allocates a
// replacement of size bytes into it, touching it. A failed allocation leaves NULL in its slot.
static int64_t BENCH_FN(churn)(void **slots, int64_t live, size_t size, int64_t n) {
	int64_t t0 = bench_now_ns();
	for (int64_t i = 0; i < n; i++) {
		uint64_t k = bench_churn_slot((uint64_t)i, (uint64_t)live);
		BENCH_FREE(slots[k]);
		char *p = BENCH_MALLOC(size);
		slots[k] = p;
		if (p == NULL) return -1;
		p[0] = (char)i;
	}
	return bench_now_ns() - t0;
}

// <prefix>_churn_close frees the churn's blocks and their table.
static void BENCH_FN(churn_close)(void **slots, int64_t live) {
	for (int64_t i = 0; i < live; i++) {
		if (slots[i] != NULL) BENCH_FREE(slots[i]);
	}
	free(slots);
}

// <prefix>_replay plays a recorded trace (replay.go): ev[i] is size<<1 for an allocation
// (numbered in order into slots) or id<<1|1 for the free of allocation id. Every block's first
// byte is written. Every 256 events it samples BENCH_HELD() (the memory the allocator holds
// from the OS, committed) into *peak; the samples' own time is left out of the elapsed time.
// It returns the elapsed ns, or -1 when an allocation failed (what it allocated is freed
// either way).
static int64_t BENCH_FN(replay)(const uint64_t *ev, int64_t n, void **slots, int64_t *peak) {
	int64_t next = 0, failed = 0, sampling = 0;
	*peak = 0;
	int64_t t0 = bench_now_ns();
	for (int64_t i = 0; i < n && !failed; i++) {
		if ((i & 255) == 0) {
			int64_t s0 = bench_now_ns(), h = BENCH_HELD();
			if (h > *peak) *peak = h;
			sampling += bench_now_ns() - s0;
		}
		uint64_t e = ev[i];
		if (e & 1) {
			BENCH_FREE(slots[e >> 1]);
			slots[e >> 1] = NULL;
			continue;
		}
		char *p = BENCH_MALLOC((size_t)(e >> 1));
		failed = p == NULL;
		if (p != NULL) p[0] = 1;
		slots[next++] = p;
	}
	int64_t el = bench_now_ns() - t0 - sampling;
	int64_t h = BENCH_HELD();
	if (h > *peak) *peak = h;
	for (int64_t i = 0; i < next; i++) {
		if (slots[i] != NULL) BENCH_FREE(slots[i]);
	}
	return failed ? -1 : el;
}

// <prefix>_baseline gives back what it can (BENCH_COLLECT) and returns what the allocator holds
// then (BENCH_HELD), just before a footprint case starts its threads: in a footprint child,
// what the process held before the case (glibc: the arenas of the Go runtime's threads that
// called malloc, and the main arena, whose top a later trim would shrink under the case's
// figures were it not trimmed here). The calling thread allocates once first, so that its
// arena, if it had none, is the baseline's: glibc's pthread_create allocates the new thread's
// TLS on the calling thread, whose first malloc made it an arena of 132 KiB in the case's
// figures. Taken here, not from Go before the call: between the two, the Go runtime's threads
// made arenas (a collection's workers).
static int64_t BENCH_FN(baseline)(void) {
	void *p = BENCH_MALLOC(1);
	if (p != NULL) BENCH_FREE(p);
	BENCH_COLLECT();
	return BENCH_HELD();
}

// <prefix>_replay_fresh is <prefix>_replay on a new thread, as the larson's threads are new: in
// glibc a thread that allocates first gets an arena of its own, so the replay's blocks are not
// put in the free room of an arena that was there before (which *base counts): the peak less
// *base is the case's own. *base gets <prefix>_baseline's figure, taken first. -2: no thread.
static int64_t BENCH_FN(replay_fresh)(const uint64_t *ev, int64_t n, void **slots, int64_t *peak, int64_t *base) {
	bench_replay_call c = {BENCH_FN(replay), ev, n, slots, peak, -1};
	*base = BENCH_FN(baseline)();
	return bench_replay_fresh(&c);
}

static void *BENCH_FN(larson_malloc)(size_t n) { return BENCH_MALLOC(n); }
static void BENCH_FN(larson_collect)(void) { BENCH_COLLECT(); }
static int64_t BENCH_FN(larson_held)(void) { return BENCH_HELD(); }

// <prefix>_larson runs the footprint cases' larson churn (footprint.go) on threads threads:
// see bench_larson_run. *base gets <prefix>_baseline's figure, taken first.
static int64_t BENCH_FN(larson)(int64_t threads, int64_t slots, uint64_t lo, uint64_t hi, int64_t steps, int64_t idle_ms, int64_t held[3], int64_t *live, int64_t *base) {
	*base = BENCH_FN(baseline)();
	bench_larson r = {.threads = threads, .slots = slots, .steps = steps, .lo = lo, .hi = hi,
		.malloc_fn = BENCH_FN(larson_malloc), .free_fn = BENCH_FN(release), .collect_fn = BENCH_FN(larson_collect)};
	return bench_larson_run(&r, idle_ms, BENCH_FN(larson_held), held, live);
}

#undef BENCH_CAT2
#undef BENCH_CAT
#undef BENCH_FN
